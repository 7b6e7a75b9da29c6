#!/usr/bin/env python3
"""Writes the `promtool test rules` cases of alerts/ (python3, stdlib only):
tests/monitoring/rules.test.yml for the committed rule files (60 s scrape
interval), and the same cases for the rule files rendered at any other
scrape interval (run.py static runs them at 15 s, 20 s, 30 s and 60 s).

Input series are sampled every scrape interval from t=0; rules are evaluated
every EVALUATION seconds, which is not a multiple of any tested scrape
interval, and build() fails when an evaluation that a case checks falls on a
sample: no case can pass only because samples and evaluations line up.

Every rule of the exporter's table (docs/rules.json) gets a case in which its
finding fires the alert, an info finding of it does not, and the alert
resolves once the finding goes stale. The expected labels and `$value`
renderings are written here; summaries, descriptions and runbook URLs are
the alert's templates rendered with them, so promtool checks that the
templates name the right labels.

    python3 tests/monitoring/gen_rule_tests.py      # rewrite rules.test.yml
"""

import json
import math
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "alerts"))
sys.path.insert(0, os.path.join(ROOT, "mixin"))
import generate  # noqa: E402  (alerts/generate.py)
import render as mixin  # noqa: E402  (mixin/render.py)

EVALUATION = 17  # seconds; prime, so evaluations drift across the samples
# 20 s: an interval that does not divide a minute (ranges of 80 s, `for:`
# of 40 s).
SCRAPE_INTERVALS = (15, 20, 30, 60)
COMMITTED_RULE_FILES = ["../../alerts/roce_exporter.rules.yml",
                        "../../alerts/roce_exporter.recording.rules.yml",
                        "../../alerts/roce_exporter.fleet.rules.yml"]

J = 'job="roce_exporter"'
N1 = J + ', instance="n1:9879"'
N2 = J + ', instance="n2:9879"'
N3 = J + ', instance="n3:9879"'
N4 = J + ', instance="n4:9879"'
BASE1 = {"job": "roce_exporter", "instance": "n1:9879"}
BASE2 = {"job": "roce_exporter", "instance": "n2:9879"}
BASE3 = {"job": "roce_exporter", "instance": "n3:9879"}
# The exporter that is up in every group (runbook URLs of alerts without a
# live instance point at it).
UP_INSTANCE = "n2:9879"
NODE_EXPORTER_JOIN = "node_exporter_device:roce_netdev_port:info"
DCGM_JOIN = "dcgm_exporter_gpu:roce_gpu:info"
NOTIFY = ("critical", "warning")


def rule_table():
    """The exporter's rule table (docs/rules.json)."""
    with open(os.path.join(ROOT, "docs", "rules.json"), encoding="utf-8") as f:
        return json.load(f)


def notifies(rule):
    """Whether a rule can report a finding that notifies (warning or
    critical): those have an alert."""
    return any(sev in NOTIFY for sev in rule["severities"])


def finding_alert(rule_id, rules):
    """The alert that routes on a rule's finding (roce_finding{rule=...})."""
    (name,) = [n for n, r in rules.items() if f'rule="{rule_id}"' in r["expr"]]
    return name


def s(name, labels, values):
    return {"series": f"{name}{{{labels}}}", "values": values}


class Timeline:
    """Series values at one scrape interval: `at(m)` is the sample index of
    minute m."""

    def __init__(self, scrape):
        self.scrape = scrape

    def n(self, minutes):
        return int(minutes * 60 // self.scrape)

    def const(self, value, minutes):
        return f"{value}x{self.n(minutes)}"

    def ramp(self, start, per_minute, minutes):
        """A counter growing `per_minute`, sampled every scrape."""
        step = per_minute * self.scrape / 60
        return f"{start}+{fmt(step)}x{self.n(minutes)}"

    def present(self, value, start, end, total):
        """Absent before minute `start`, `value` until `end`, then stale."""
        parts = []
        if self.n(start):
            parts.append(f"_x{self.n(start)}")
        parts.append(f"{value}x{self.n(end) - self.n(start) - 1}")
        parts.append("stale")
        rest = self.n(total) - self.n(end)
        if rest > 0:
            parts.append(f"_x{rest}")
        return " ".join(parts)


def fmt(x):
    return str(int(x)) if float(x).is_integer() else repr(x)


def evaluated_at(eval_time):
    """The evaluation promtool compares at eval_time: the last one at or
    before it."""
    return (eval_time // EVALUATION) * EVALUATION


def seconds(text):
    total = 0
    for n, unit in re.findall(r"(\d+)([hms])", text):
        total += int(n) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


def humanize_duration(v):
    """Prometheus' humanizeDuration for v >= 1 s."""
    v = int(v)
    d, h, m, sec = v // 86400, v // 3600 % 24, v // 60 % 60, v % 60
    if d:
        return f"{d}d {h}h {m}m {sec}s"
    if h:
        return f"{h}h {m}m {sec}s"
    if m:
        return f"{m}m {sec}s"
    return f"{sec}s"


def groups(scrape):
    t = Timeline(scrape)
    rules = [r for r in rule_table()["rules"] if notifies(r)]
    alerts = rules_by_name(dict(generate.default_params(), scrape_interval=scrape))
    out = []

    # Exporter health. n1 is down from the start; n2 samples every scrape;
    # n3's sampler hangs at t=0.
    stale_at = 10 * 60
    out.append({
        "name": "exporter health",
        "series": [
            s("up", N1, t.const(0, 20)),
            s("up", N2, t.const(1, 20)),
            s("roce_sample_timestamp_seconds", N2, t.ramp(0, 60, 20)),
            s("roce_sample_timestamp_seconds", N3, t.const(0, 20)),
            s("roce_sample_interval_seconds", N2, t.const(scrape, 20)),
            s("roce_sample_interval_seconds", N3, t.const(scrape, 20)),
        ],
        "tests": [
            ("4m", "RoceExporterDown", []),
            ("7m", "RoceExporterDown", [(BASE1, None)]),
            ("3m", "RoceSampleStale", []),
            ("10m", "RoceSampleStale",
             [(BASE3, humanize_duration(evaluated_at(stale_at)))]),
        ],
    })

    # One finding per rule on n1 from minute 2 to 12, and an info finding
    # of the same rule on n2 that never notifies.
    series = []
    tests = []
    for r in rules:
        rid, severity = r["id"], r["severity"]
        labels = {"rule": rid, "severity": severity, "device": "mlx5_0", "port": "1",
                  "netdev": "ens1np0", "gpu": ""}
        text = ", ".join(f'{k}="{v}"' for k, v in labels.items())
        series.append(s("roce_finding", N1 + ", " + text, t.present(1, 2, 12, 20)))
        info = text.replace(f'severity="{severity}"', 'severity="info"')
        series.append(s("roce_finding", N2 + ", " + info, t.const(1, 20)))
        name = finding_alert(rid, alerts)
        tests += [
            ("1m", name, []),
            ("8m", name, [(dict(BASE1, **labels), None)]),
            ("19m", name, []),
        ]
    out.append({"name": "findings", "series": series, "tests": tests})

    # n1 loses one of its two devices at minute 10; n3 loses its only one;
    # n2 keeps its device. The drop is remembered for nic_count_window.
    window = seconds(mixin.effective_config()["nicCountWindow"]) // 60
    total = 10 + window + 10
    out.append({
        "name": "rdma device count",
        "series": [
            s("up", N1, t.const(1, total)),
            s("up", N2, t.const(1, total)),
            s("up", N3, t.const(1, total)),
            s("roce_device_info", N1 + ', device="mlx5_0", hca_type="MT4129", fw_version="1"',
              t.const(1, total)),
            s("roce_device_info", N1 + ', device="mlx5_1", hca_type="MT4129", fw_version="1"',
              t.present(1, 0, 10, total)),
            s("roce_device_info", N2 + ', device="mlx5_0", hca_type="MT4129", fw_version="1"',
              t.const(1, total)),
            s("roce_device_info", N3 + ', device="mlx5_0", hca_type="MT4129", fw_version="1"',
              t.present(1, 0, 10, total)),
        ],
        "tests": [
            ("8m", "RoceNicCountDropped", []),
            ("14m", "RoceNicCountDropped", [(BASE1, "1"), (BASE3, "0")]),
            (f"{10 + window + 5}m", "RoceNicCountDropped", []),
        ],
    })

    # Ports compared with the fastest active port of their NIC model: n1's
    # MT4129 at 200 Gb/s is slow next to n2's 400; n1's MT2910 front-end NIC
    # at 200 Gb/s has no faster peer; n2's down port is not compared.
    P0 = 'device="mlx5_0", port="1"'
    P1 = 'device="mlx5_1", port="1"'
    out.append({
        "name": "link rate against peers of the same model",
        "series": [
            s("roce_device_info", N1 + ', device="mlx5_0", hca_type="MT4129", fw_version="1"',
              t.const(1, 30)),
            s("roce_device_info", N2 + ', device="mlx5_0", hca_type="MT4129", fw_version="1"',
              t.const(1, 30)),
            s("roce_device_info", N1 + ', device="mlx5_1", hca_type="MT2910", fw_version="1"',
              t.const(1, 30)),
            s("roce_device_info", N2 + ', device="mlx5_1", hca_type="MT4129", fw_version="1"',
              t.const(1, 30)),
            s("roce_port_rate_bytes_per_second", N1 + ", " + P0, t.const(25000000000, 30)),
            s("roce_port_rate_bytes_per_second", N2 + ", " + P0, t.const(50000000000, 30)),
            s("roce_port_rate_bytes_per_second", N1 + ", " + P1, t.const(25000000000, 30)),
            s("roce_port_rate_bytes_per_second", N2 + ", " + P1, t.const(100000000000, 30)),
            s("roce_port_up", N1 + ", " + P0, t.const(1, 30)),
            s("roce_port_up", N2 + ", " + P0, t.const(1, 30)),
            s("roce_port_up", N1 + ", " + P1, t.const(1, 30)),
            s("roce_port_up", N2 + ", " + P1, t.const(0, 30)),
        ],
        "tests": [
            ("10m", "RoceLinkRateBelowPeers", []),
            ("20m", "RoceLinkRateBelowPeers",
             [(dict(BASE1, device="mlx5_0", port="1", hca_type="MT4129"), "25G")]),
        ],
    })

    # Three nodes, one of which (n3) differs from the other two in every
    # fleet comparison: each alert names n3's device, netdev or GID slot,
    # with its value, and nothing of n1 or n2.
    fleet = 80
    FW_OLD, FW_NEW = "28.39.1002", "28.40.1000"
    series = [s("up", N2, t.const(1, fleet)),
              # a Soft-RoCE device without firmware: not compared
              s("roce_device_info", N1 + ', device="rxe0", hca_type="", fw_version=""',
                t.const(1, fleet))]
    for n, odd in ((N1, False), (N2, False), (N3, True)):
        series += [
            s("roce_device_info", n + ', device="mlx5_0", hca_type="MT4129", fw_version="'
              + (FW_OLD if odd else FW_NEW) + '"', t.const(1, fleet)),
            s("roce_device_info", n + ', device="mlx5_1", hca_type="MT4125", '
              'fw_version="22.39.1002"', t.const(1, fleet)),
            s("roce_netdev_mtu_bytes", n + ', netdev="ens1np0", ' + P0,
              t.const(4200 if odd else 9000, fleet)),
            # management netdev without an RDMA port: not part of the check
            s("roce_netdev_mtu_bytes", n + ', netdev="eth0", device="", port=""',
              t.const(1500, fleet)),
            # ETS and buffers not reported by the driver: empty, not compared
            s("roce_qos_info", n + ', netdev="ens1np0", ' + P0 + ', trust="'
              + ("pcp" if odd else "dscp") + '", pfc="' + ("none" if odd else "3")
              + '", prio_tc="", tc_tsa="", tc_bw="", prio_buffer="", buffer_size="", '
              'dcbx="firmware"', t.const(1, fleet)),
            s("roce_gid_info", n + ", " + P0 + ', index="3", type="'
              + ("IB/RoCE v1" if odd else "RoCE v2") + '", family="ipv4_mapped", '
              'gid="::ffff:10.0.0.1", netdev="ens1np0"', t.const(1, fleet)),
            s("roce_gid_info", n + ", " + P0 + ', index="0", type="IB/RoCE v1", '
              'family="ipv6_link_local", gid="fe80::1", netdev="ens1np0"', t.const(1, fleet)),
        ]
    netdev3 = dict(BASE3, netdev="ens1np0", device="mlx5_0", port="1")
    out.append({
        "name": "fleet inconsistencies: one node differs",
        "series": series,
        "tests": [
            ("50m", "RoceQosConfigDrift", []),
            ("70m", "RoceQosConfigDrift",
             [(dict(netdev3, config="pfc", hca_type="MT4129", pfc="none"), "1"),
              (dict(netdev3, config="trust", hca_type="MT4129", trust="pcp"), "1")]),
            ("50m", "RoceFirmwareDrift", []),
            ("70m", "RoceFirmwareDrift",
             [(dict(BASE3, device="mlx5_0", hca_type="MT4129", fw_version=FW_OLD), "1")]),
            ("70m", "RoceMtuInconsistent", [(dict(netdev3, mtu="4200"), "1")]),
            ("70m", "RocePfcPriorityInconsistent",
             [(dict(netdev3, pfc="none"), "1")]),
            ("70m", "RoceGidTypeInconsistent",
             [(dict(netdev3, index="3", type="IB/RoCE v1", family="ipv4_mapped"), "1")]),
        ],
    })
    # Two nodes that differ: no value has a majority, so both are named.
    out.append({
        "name": "fleet inconsistencies: two nodes, no majority",
        "series": [
            s("up", N2, t.const(1, fleet)),
            s("roce_netdev_mtu_bytes", N1 + ', netdev="ens1np0", ' + P0, t.const(9000, fleet)),
            s("roce_netdev_mtu_bytes", N2 + ', netdev="ens1np0", ' + P0, t.const(4200, fleet)),
        ],
        "tests": [
            ("70m", "RoceMtuInconsistent",
             [(dict(BASE1, netdev="ens1np0", device="mlx5_0", port="1", mtu="9000"), "1"),
              (dict(BASE2, netdev="ens1np0", device="mlx5_0", port="1", mtu="4200"), "1")]),
        ],
    })
    # Two NIC generations in one fleet: ConnectX-7 (MT4129) on n1, n2 and
    # n4, ConnectX-6 Dx (MT4125) on n3, each generation with its own ETS and
    # DCQCN defaults. Only a difference within a generation is drift: n2's
    # rpg_time_reset differs from n1's and n4's.
    ets7 = 'prio_tc="0,0,0,3,0,0,6,0", tc_tsa="ets,ets,ets,ets,ets,ets,strict,ets", tc_bw="50,0,0,50,0,0,0,0"'
    ets6 = 'prio_tc="1,0,2,3,4,5,6,7", tc_tsa="ets,ets,ets,ets,ets,ets,ets,ets", tc_bw="13,12,13,12,13,12,13,12"'
    gens = [(N1, "MT4129", ets7, 1, 300), (N2, "MT4129", ets7, 1, 600),
            (N3, "MT4125", ets6, 10, 300), (N4, "MT4129", ets7, 1, 300)]
    series = [s("up", N2, t.const(1, fleet))]
    for n, hca, ets, min_rate, reset in gens:
        series += [
            s("roce_device_info", n + f', device="mlx5_0", driver="mlx5_core", hca_type="{hca}", '
              'fw_version="1"', t.const(1, fleet)),
            s("roce_qos_info", n + ', netdev="ens1np0", ' + P0 + ', trust="dscp", pfc="3", '
              + ets + ', prio_buffer="0,0,0,1,0,0,0,0", '
              + f'buffer_size="{min_rate * 130944},130944,0,0,0,0,0,0", dcbx="firmware"',
              t.const(1, fleet)),
            s("roce_dcqcn_parameters_info", n + ', netdev="ens1np0", ' + P0
              + ', source="sysfs", parameters="'
              + f'rp.rpg_min_rate={min_rate},rp.rpg_time_reset={reset}"', t.const(1, fleet)),
        ]
    out.append({
        "name": "two NIC generations: drift within a generation only",
        "series": series,
        "tests": [
            ("70m", "RoceQosConfigDrift",
             [(dict(BASE2, netdev="ens1np0", device="mlx5_0", port="1",
                    config="dcqcn_parameters", source="sysfs", hca_type="MT4129",
                    driver="mlx5_core",
                    parameters="rp.rpg_min_rate=1,rp.rpg_time_reset=600"), "1")]),
        ],
    })
    out.append({
        "name": "consistent fleet",
        "series": [
            s("roce_netdev_mtu_bytes", N1 + ', netdev="ens1np0", ' + P0, t.const(9000, fleet)),
            s("roce_netdev_mtu_bytes", N2 + ', netdev="ens1np0", ' + P0, t.const(9000, fleet)),
            # management netdev without an RDMA port: not part of the check.
            s("roce_netdev_mtu_bytes", N2 + ', netdev="eth0", device="", port=""',
              t.const(1500, fleet)),
            s("roce_device_info", N1 + ', device="mlx5_0", hca_type="MT4129", fw_version="28.39.1002"',
              t.const(1, fleet)),
            s("roce_device_info", N2 + ', device="mlx5_0", hca_type="MT4129", fw_version="28.39.1002"',
              t.const(1, fleet)),
            s("roce_qos_info", N1 + ', netdev="ens1np0", ' + P0 + ', trust="dscp", pfc="3", '
              'prio_tc="0,0,0,3,0,0,6,0", tc_tsa="ets,ets,ets,ets,ets,ets,strict,ets", '
              'tc_bw="50,0,0,50,0,0,0,0", prio_buffer="", buffer_size="", dcbx="firmware"',
              t.const(1, fleet)),
            s("roce_qos_info", N2 + ', netdev="ens1np0", ' + P0 + ', trust="dscp", pfc="3", '
              'prio_tc="0,0,0,3,0,0,6,0", tc_tsa="ets,ets,ets,ets,ets,ets,strict,ets", '
              'tc_bw="50,0,0,50,0,0,0,0", prio_buffer="", buffer_size="", dcbx="firmware"',
              t.const(1, fleet)),
            # a management netdev without an RDMA port: not compared.
            s("roce_qos_info", N2 + ', netdev="eth0", device="", port="", trust="pcp", '
              'pfc="none", prio_tc="", tc_tsa="", tc_bw="", prio_buffer="", buffer_size="", '
              'dcbx=""', t.const(1, fleet)),
        ],
        "tests": [
            ("70m", "RoceQosConfigDrift", []),
            ("70m", "RoceMtuInconsistent", []),
            ("70m", "RocePfcPriorityInconsistent", []),
            ("70m", "RoceFirmwareDrift", []),
            ("70m", "RoceGidTypeInconsistent", []),
        ],
    })
    out += fec_groups(scrape)
    out += peer_probe_groups(scrape)
    out += peer_timing_groups(scrape)
    out += lldp_rail_groups(scrape)
    out += join_groups(scrape)
    return out


def fec_groups(scrape):
    """The fleet layer's FEC uncorrectable rate, on series shaped like the
    kernel's ETHTOOL_A_FEC_STAT_UNCORR: the total (lane="") ahead of the
    per-lane counts, which add up to it. n1 has both: its rate is the
    total's, 1 block/s (not the 2 of total plus lanes); n2's driver reports
    lanes only (a series set without a total): their sum, 0.5 block/s."""
    t = Timeline(scrape)
    port = ', netdev="ens1np0", device="mlx5_0", port="1"'
    series = [s("roce_fec_uncorrectable_blocks_total", N1 + port + ', lane=""',
                t.ramp(100000, 60, 20))]
    series += [s("roce_fec_uncorrectable_blocks_total", N1 + port + f', lane="{lane}"',
                 t.ramp(25000, 15, 20)) for lane in range(4)]
    series += [s("roce_fec_uncorrectable_blocks_total", N2 + port + f', lane="{lane}"',
                 t.ramp(25000, 15, 20)) for lane in range(2)]
    record = "instance_device_port:roce_fec_uncorrectable:rate"
    at = dict(device="mlx5_0", port="1")
    return [{
        "name": "fec uncorrectable: kernel total and lanes",
        "series": series,
        "tests": [],
        "expr_tests": [
            ("10m", record, [(dict(BASE1, **at), "1"), (dict(BASE2, **at), "0.5")]),
            ("10m", "rail:roce_fec_uncorrectable:sum_rate",
             [({"job": "roce_exporter", **at}, "1.5")]),
        ],
    }]


# Peer probes across nodes. Node i runs exporter "n<i>:9879" with one port
# mlx5_0/1 named "node<i>" in the other exporters' `peer` label; every
# exporter probes every other (at most 24 peers a port are exposed, so a
# small fleet is all-to-all). Values are roce_peer_probe_peer_lost: of the
# last 16 small (or large) probes of the pair, how many were lost.
PEER_DEVICE = "mlx5_0/1"
PEER_ALERTS = ("RocePeerProbeNodeUnreachable", "RocePeerProbePortLosesPeers",
               "RocePeerProbePairLoss", "RocePeerProbeSwitchLosesPeers")


def phases(t, *parts):
    """Values over consecutive phases: (value, minutes), "_" for absent
    samples, "stale" (minutes ignored) for the staleness marker."""
    out = []
    for value, minutes in parts:
        if value == "stale":
            out.append("stale")
            continue
        k = t.n(minutes)
        if k <= 0:
            continue
        out.append(f"_x{k}" if value == "_" else f"{value}x{k - 1}")
    return " ".join(out)


def peer_lost(i, j, values, large=None):
    """The pair (node i, node j)'s series, both sizes (the large probes
    lose what the small ones do unless `large` says otherwise)."""
    return [s("roce_peer_probe_peer_lost",
              f'{J}, instance="n{i}:9879", device="mlx5_0", port="1", '
              f'peer="node{j}", peer_device="{PEER_DEVICE}", size="{size}"', v)
            for size, v in (("small", values), ("large", large or values))]


def peer_fleet(nodes, lost):
    """roce_peer_probe_peer_lost of an all-to-all fleet of `nodes`;
    lost(prober, peer) gives the pair's values."""
    return [x for i in nodes for j in nodes if i != j for x in peer_lost(i, j, lost(i, j))]


def endpoint_info(i, values):
    """Exporter i's own responder (roce_peer_probe_endpoint_info): which
    instance and port node<i> is."""
    return s("roce_peer_probe_endpoint_info",
             f'{J}, instance="n{i}:9879", node="node{i}", device="mlx5_0", port="1", '
             f'device_index="0", gid="::ffff:10.0.0.{i}", gid_index="3", qpn="{100 + i}", '
             'mtu="4096", subnet="10.0.0.0/24", rail="10.0.0.0/24"', values)


def node_alert(i, value="100%", known=False, **extra):
    """The verdict on node<i>; `known`: its endpoint info names its exporter."""
    labels = {"job": "roce_exporter", "peer": f"node{i}", "peer_device": PEER_DEVICE}
    if known:
        labels.update(instance=f"n{i}:9879", device="mlx5_0", port="1")
    return (dict(labels, **extra), value)


def port_alert(i, value="100%", **extra):
    return (dict({"job": "roce_exporter", "instance": f"n{i}:9879", "device": "mlx5_0",
                  "port": "1"}, **extra), value)


def pair_alert(i, j, value):
    return (dict(port_alert(i)[0], peer=f"node{j}", peer_device=PEER_DEVICE), value)


def quiet(at):
    return [(at, name, []) for name in PEER_ALERTS]


def peer_probe_groups(scrape):
    t = Timeline(scrape)
    out = []
    # Six nodes. From minute 5 to 25: node6 is dead (its exporter and
    # responder gone: every prober loses all of it, its own series end);
    # node5's port is black-holed (it loses every peer, every peer loses
    # it); the path node1-node2 loses about a third of its probes, both
    # ways; the path node3-node4 has a lower MTU (its large probes are
    # lost, the small ones pass: the node's path_mtu finding, no verdict
    # here). Before and after: healthy, with single losses here and there
    # (one in 16 is noise, never a verdict).
    total, onset, end = 40, 5, 25
    noise = {(1, 3), (2, 4), (3, 1), (4, 6), (6, 2)}

    def lost(i, j):
        healthy = 1 if (i, j) in noise else 0
        if j == 6 or i == 5 or j == 5:
            fault = 16
        elif (i, j) in ((1, 2), (2, 1)):
            fault = 5 if i == 1 else 4
        else:
            fault = healthy
        return phases(t, (healthy, onset), (fault, end - onset), (healthy, total - end))

    series = []
    for i in range(1, 7):
        for j in range(1, 7):
            if i == j:
                continue
            if i == 6:  # node6's own series end with it
                values = phases(t, (1 if (6, j) in noise else 0, onset), ("stale", 0))
            else:
                values = lost(i, j)
            mtu = phases(t, (0, onset), (16, end - onset), (0, total - end))
            series += peer_lost(i, j, values, mtu if {i, j} == {3, 4} else None)
    out.append({
        "name": "peer probes: a dead node, a black-holed port, a lossy path",
        "series": [s("up", N2, t.const(1, total))] + series + [
            endpoint_info(i, t.const(1, total) if i != 6 else phases(t, (1, onset), ("stale", 0)))
            for i in range(1, 7)],
        "tests": quiet("4m") + [
            # the dead node's exporter is remembered from its endpoint info
            ("15m", "RocePeerProbeNodeUnreachable", [node_alert(5, known=True),
                                                     node_alert(6, known=True)]),
            ("15m", "RocePeerProbePortLosesPeers", [port_alert(5)]),
            ("15m", "RocePeerProbePairLoss", [pair_alert(1, 2, "5"), pair_alert(2, 1, "4")]),
            ("15m", "RocePeerProbeSwitchLosesPeers", []),
        ] + quiet("33m"),
    })

    # The three VMs of tests/vm/e2e-fleet.sh, scenario by scenario: one
    # node's exporter stopped, one port's RoCE traffic dropped, one path
    # lossy. A majority of two witnesses is both. The exporters' endpoint
    # info is there in the first (the stopped node's remembered), not in
    # the others (the verdict names the node by its peer labels only).
    for name, fault, expected in (
            ("node3 stopped", lambda i, j: 16 if j == 3 else 0,
             [("RocePeerProbeNodeUnreachable", [node_alert(3, known=True)])]),
            ("node1's RoCE traffic dropped", lambda i, j: 16 if 1 in (i, j) else 0,
             [("RocePeerProbeNodeUnreachable", [node_alert(1)]),
              ("RocePeerProbePortLosesPeers", [port_alert(1)])]),
            ("loss between node1 and node2 only",
             lambda i, j: 7 if {i, j} == {1, 2} else 0,
             [("RocePeerProbePairLoss", [pair_alert(1, 2, "7"), pair_alert(2, 1, "7")])])):
        series = []
        for i in range(1, 4):
            for j in range(1, 4):
                if i == j:
                    continue
                if name.startswith("node3") and i == 3:
                    values = phases(t, (0, onset), ("stale", 0))
                else:
                    values = phases(t, (0, onset), (fault(i, j), 15))
                series += peer_lost(i, j, values)
        if name.startswith("node3"):
            series += [endpoint_info(i, t.const(1, 20) if i != 3 else
                                     phases(t, (1, onset), ("stale", 0))) for i in range(1, 4)]
        named = dict(expected)
        out.append({
            "name": f"peer probes, three nodes: {name}",
            "series": [s("up", N2, t.const(1, 20))] + series,
            "tests": quiet("4m") + [("15m", a, named.get(a, [])) for a in PEER_ALERTS],
        })

    # Twelve nodes on three leaf switches (LLDP: roce_lldp_neighbor_info
    # names each port's switch), node9-node12 on leaf-3, which drops
    # everything from minute 5: its ports lose every peer and every peer
    # loses them; leaf-1 and leaf-2 pass among themselves. node12 sees two
    # LLDP neighbours, so no switch is its own. The same fleet without the
    # LLDP and endpoint info series names the nodes and ports only.
    def leaf(i):
        return f"leaf-{(i - 1) // 4 + 1}"

    def lost12(i, j):
        fault = 16 if leaf(i) == "leaf-3" or leaf(j) == "leaf-3" else 0
        return phases(t, (0, onset), (fault, 25))

    nodes = range(1, 13)
    fleet = peer_fleet(nodes, lost12)
    lldp = [s("roce_lldp_neighbor_info",
              f'{J}, instance="n{i}:9879", device="mlx5_0", port="1", netdev="ens1np0", '
              f'system_name="{leaf(i)}", port_id="Ethernet{i}"', t.const(1, 30)) for i in nodes]
    lldp.append(s("roce_lldp_neighbor_info",
                  f'{J}, instance="n12:9879", device="mlx5_0", port="1", netdev="ens1np0", '
                  'system_name="leaf-3b", port_id="Ethernet12"', t.const(1, 30)))
    lldp += [endpoint_info(i, t.const(1, 30)) for i in nodes]
    on_leaf3 = range(9, 13)
    for with_lldp in (True, False):
        on_switch = [with_lldp and i != 12 for i in range(13)]
        ports = [port_alert(i, **({"system_name": "leaf-3"} if on_switch[i] else {}))
                 for i in on_leaf3]
        nodes_lost = [node_alert(i, known=with_lldp,
                                 **({"system_name": "leaf-3"} if on_switch[i] else {}))
                      for i in on_leaf3]
        out.append({
            "name": "peer probes: a leaf switch down, " + ("LLDP names it" if with_lldp
                                                           else "no LLDP"),
            "series": [s("up", N2, t.const(1, 30))] + fleet + (lldp if with_lldp else []),
            "tests": quiet("4m") + [
                ("15m", "RocePeerProbeNodeUnreachable", nodes_lost),
                ("15m", "RocePeerProbePortLosesPeers", ports),
                ("15m", "RocePeerProbePairLoss", []),
                ("15m", "RocePeerProbeSwitchLosesPeers",
                 [({"job": "roce_exporter", "system_name": "leaf-3"}, "100%")]
                 if with_lldp else []),
            ],
        })
    return out


# How soon the peer-probe alerts fire after a fault at FAULT s. The
# exporters' own verdicts are timed on the prober's virtual clock by
# crates/probe/tests/peer_judgement.rs (1,000 nodes at the default 5
# probes/s: a dead peer named by the fleet's votes after 6.6 s, a
# black-holed local port judged isolated after 7.0 s); each reaches the
# exporter's next sample (sample_interval, 5 s) and the first scrape
# after that. GOALS: at most this long from the fault to the alert at a
# 30 s scrape interval (and faster ones): the build fails otherwise.
FAULT = 300
VERDICT_SECONDS = {"dead": 6.6, "black_holed": 7.0}
SAMPLE_SECONDS = 5
GOALS = {"dead": 120, "black_holed": 60}


def first_evaluation(at):
    """The first rule evaluation at or after `at` seconds."""
    return math.ceil(at / EVALUATION) * EVALUATION


def alert_timing(scrape, fault, for_seconds):
    """(sample that first shows the verdict, evaluation at which the alert
    fires), seconds."""
    seen = math.ceil((FAULT + VERDICT_SECONDS[fault] + SAMPLE_SECONDS) / scrape) * scrape
    pending = first_evaluation(seen)
    return seen, (pending if for_seconds == 0 else first_evaluation(pending + for_seconds))


def before_firing(fires, scrape):
    """A time whose evaluation is the last one before `fires` (or the one
    before that where the last falls on a sample, which promtool cannot
    order against the sample)."""
    t = fires - 1
    while evaluated_at(t) % scrape == 0:
        t = evaluated_at(t) - 1
    return t


def after_firing(fires, scrape):
    """A time whose evaluation is `fires` (or the next one off a sample)."""
    t = fires + 1
    while evaluated_at(t) % scrape == 0:
        t = evaluated_at(t) + EVALUATION + 1
    return t


def peer_timing_groups(scrape):
    """A dead node named by the fleet, and a black-holed port's own
    finding, each alerting at the evaluation alert_timing() gives, not the
    one before; within GOALS of the fault at scrape intervals of 30 s and
    less."""
    t = Timeline(scrape)
    alerts = rules_by_name(dict(generate.default_params(), scrape_interval=scrape))
    total = 20
    out = []
    timings = {}
    for fault, alert_name in (("dead", "RocePeerProbeNodeUnreachable"),
                              ("black_holed", "RocePeerProbePortIsolated")):
        for_text = alerts[alert_name].get("for", "0s")
        seen, fires = alert_timing(scrape, fault, seconds(for_text))
        timings[fault] = (seen, fires)
        if scrape <= 30 and fires - FAULT > GOALS[fault]:
            raise SystemExit(f"{fault}: the alert fires {fires - FAULT} s after the fault at a "
                             f"{scrape} s scrape, past the goal of {GOALS[fault]} s")
    # node3 dies at FAULT: its own series end, and from the first scrape
    # after the fleet's verdict both probers lost it (16 of 16).
    seen, fires = timings["dead"]
    before = seen // scrape
    series = []
    for i in range(1, 4):
        for j in range(1, 4):
            if i == j:
                continue
            if i == 3:
                values = f"0x{FAULT // scrape - 1} stale"
            elif j == 3:
                values = f"0x{before - 1} 16x{t.n(total) - before}"
            else:
                values = t.const(0, total)
            series += peer_lost(i, j, values)
    series += [endpoint_info(i, t.const(1, total) if i != 3 else f"1x{FAULT // scrape - 1} stale")
               for i in range(1, 4)]
    out.append({
        "name": "peer probes: how soon a dead node is named",
        "series": [s("up", N2, t.const(1, total))] + series,
        "tests": [(f"{before_firing(fires, scrape)}s", "RocePeerProbeNodeUnreachable", []),
                  (f"{after_firing(fires, scrape)}s", "RocePeerProbeNodeUnreachable",
                   [node_alert(3, known=True)])],
    })
    # n1's port black-holed at FAULT: its exporter's finding from the
    # first scrape after its verdict.
    seen, fires = timings["black_holed"]
    labels = {"rule": "peer_probe_port_isolated", "severity": "critical", "device": "mlx5_0",
              "port": "1", "netdev": "ens1np0", "gpu": ""}
    text = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    out.append({
        "name": "peer probes: how soon a black-holed port alerts",
        "series": [s("up", N2, t.const(1, total)),
                   s("roce_finding", N1 + ", " + text,
                     f"_x{seen // scrape} 1x{t.n(total) - seen // scrape - 1}")],
        "tests": [(f"{before_firing(fires, scrape)}s", "RocePeerProbePortIsolated", []),
                  (f"{after_firing(fires, scrape)}s", "RocePeerProbePortIsolated",
                   [(dict(BASE1, **labels), None)])],
    })
    return out


LLDP_RAIL_ALERTS = ("RoceLldpRailOddOneOut", "RoceLldpPodOfOne", "RoceLldpTwoNicsOneSwitchPort")


def lldp_rail_groups(scrape):
    """Five nodes of a rail-optimized pod by their LLDP neighbours: n1-n4
    reach leaf-0a with mlx5_0 (pod leaf-0a), n5 reaches leaf-0b (a pod of
    one); mlx5_1 of n3 reaches leaf-1b where the pod's others reach
    leaf-1a; mlx5_2 and mlx5_3 of n2 report the same switch port. Then the
    same fleet cabled right: nothing fires."""
    t = Timeline(scrape)

    def neighbour(node, nic, switch, port):
        return s("roce_lldp_neighbor_info",
                 f'{J}, instance="n{node}:9879", device="mlx5_{nic}", port="1", '
                 f'netdev="ens{nic}np0", chassis_id="1c:34:da:5a:00:0{nic}", '
                 f'port_id="{port}", system_name="{switch}"', t.const(1, 20))

    def fleet(odd):
        out = []
        for node in range(1, 6):
            out.append(neighbour(node, 0, "leaf-0b" if odd and node == 5 else "leaf-0a",
                                 f"swp{node}"))
            out.append(neighbour(node, 1, "leaf-1b" if odd and node == 3 else "leaf-1a",
                                 f"swp{node}"))
        out.append(neighbour(2, 2, "leaf-2a", "swp5"))
        out.append(neighbour(2, 3, "leaf-2a", "swp5" if odd else "swp6"))
        return out

    miscabled = [
        ("12m", "RoceLldpRailOddOneOut",
         [({"job": "roce_exporter", "instance": "n3:9879", "device": "mlx5_1",
            "system_name": "leaf-1b", "pod": "leaf-0a"}, "1")]),
        ("12m", "RoceLldpPodOfOne",
         [({"job": "roce_exporter", "instance": "n5:9879", "pod": "leaf-0b"}, "1")]),
        ("12m", "RoceLldpTwoNicsOneSwitchPort",
         [({"job": "roce_exporter", "instance": "n2:9879", "system_name": "leaf-2a",
            "port_id": "swp5"}, "2")]),
    ]
    return [
        {"name": "LLDP rails: one NIC on another rail's leaf, a pod of one, a shared port",
         "series": fleet(True),
         "tests": [("5m", a, []) for a in LLDP_RAIL_ALERTS] + miscabled,
         "expr_tests": [
             ("2m", 'pod_device_switch:roce_lldp_nodes:count{pod="leaf-0a", device="mlx5_1"}',
              [({"job": "roce_exporter", "pod": "leaf-0a", "device": "mlx5_1",
                 "system_name": "leaf-1a"}, 3),
               ({"job": "roce_exporter", "pod": "leaf-0a", "device": "mlx5_1",
                 "system_name": "leaf-1b"}, 1)]),
         ]},
        {"name": "LLDP rails: every NIC on its rail's leaf",
         "series": fleet(False),
         "tests": [("12m", a, []) for a in LLDP_RAIL_ALERTS]},
    ]


def dashboard_query(scrape, board, title, index=0):
    """A dashboard panel's query as Prometheus runs it (Grafana's
    variables as tests/monitoring/run.py substitutes them)."""
    d = mixin.data({"scrapeIntervalSeconds": scrape}, part="dashboards")["dashboards/" + board]
    (panel,) = [p for p in d["panels"] if p["title"] == title]
    expr = panel["targets"][index]["expr"]
    for var, value in (('"$instance"', '".+"'), ('"$device"', '".+"'), ('"$job"', '".+"'),
                       ('"$cluster"', '".*"')):
        expr = expr.replace(var, value)
    return expr


# Two GPU nodes and the exporters beside ours, labelled as each exporter
# labels its series (node_exporter: collector/netclass_linux.go,
# collector/uname.go, collector/netdev_common.go, collector/ethtool_linux.go;
# dcgm-exporter: internal/pkg/rendermetrics/render_metrics.go, with the
# Kubernetes pod attributes of internal/pkg/transformation/kubernetes.go).
# gpu-a: node_exporter scraped by host name (instance gpu-a:9100, under two
# jobs), dcgm-exporter up to 4.5.x (Hostname), NVML present (our uuid).
# gpu-b: node_exporter scraped by address as kube-prometheus-stack does
# (10.0.0.12:9100, its nodename gpu-b), a newer dcgm-exporter (hostname), no
# NVML; its GPU 0 has gpu-a's GPU 0 address. gpu-c: node_exporter and
# dcgm-exporter only, no roce_exporter.
UUID_A0 = "GPU-6b1a3c2e-58d4-8b1e-2a7f-0c9d4e5f6a70"
UUID_A1 = "GPU-0f3e7d21-9c4b-4a6e-b8d2-51e3a7c9f012"


def join_groups(scrape):
    t = Timeline(scrape)
    minutes = 20
    ne = {"gpu-a": "gpu-a:9100", "gpu-b": "10.0.0.12:9100", "gpu-c": "gpu-c:9100"}

    def netdev_info(host, dev, rdma):
        return s("roce_netdev_info",
                 f'{J}, instance="{host}:9879", netdev="{dev}", device="{rdma}", port="1", '
                 f'driver="mlx5_core", operstate="up"', t.const(1, minutes))

    def node_info(host, dev, job="node-exporter", mac="b8:3f:d2:00:00:01"):
        return s("node_network_info",
                 f'job="{job}", instance="{ne[host]}", device="{dev}", address="{mac}", '
                 f'adminstate="up", broadcast="ff:ff:ff:ff:ff:ff", duplex="full", ifalias="", '
                 f'operstate="up"', t.const(1, minutes))

    def uname(host, job="node-exporter"):
        return s("node_uname_info",
                 f'job="{job}", instance="{ne[host]}", domainname="(none)", machine="x86_64", '
                 f'nodename="{host}", release="6.8.0-45-generic", sysname="Linux", '
                 f'version="#45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024"',
                 t.const(1, minutes))

    def gpu_info(host, gpu, address, bus_id, name="", uuid=""):
        return s("roce_gpu_info",
                 f'{J}, instance="{host}:9879", gpu="{gpu}", pci_address="{address}", '
                 f'pci_bus_id="{bus_id}", name="{name}", uuid="{uuid}", numa_node="{gpu // 4}"',
                 t.const(1, minutes))

    def dcgm(metric, host, gpu, bus_id, uuid, value, host_label="Hostname", pod="nccl-test-0"):
        return s(metric,
                 f'gpu="{gpu}", UUID="{uuid}", pci_bus_id="{bus_id}", device="nvidia{gpu}", '
                 f'modelName="NVIDIA H100 80GB HBM3", {host_label}="{host}", '
                 f'DCGM_FI_DRIVER_VERSION="550.54.15", job="nvidia-dcgm-exporter", '
                 f'instance="10.244.{ord(host[-1]) - 96}.17:9400", container="trainer", '
                 f'namespace="ml", pod="{pod}"', t.const(value, minutes))

    uuid_b0 = "GPU-a1c5e2b7-3d48-4f9a-8e61-7b20c4d9e355"
    series = [
        netdev_info("gpu-a", "ens1np0", "mlx5_0"), netdev_info("gpu-a", "ens2np0", "mlx5_1"),
        netdev_info("gpu-b", "ens1np0", "mlx5_0"),
        node_info("gpu-a", "ens1np0"), node_info("gpu-a", "ens2np0", mac="b8:3f:d2:00:00:02"),
        node_info("gpu-a", "eth0", mac="3c:ec:ef:00:00:01"),
        node_info("gpu-a", "ens1np0", job="node"), uname("gpu-a"), uname("gpu-a", job="node"),
        node_info("gpu-b", "ens1np0"), uname("gpu-b"),
        node_info("gpu-c", "ens1np0"), uname("gpu-c"),
        # /proc/net/dev drops, and mlx5's rx_discards_phy as node_exporter's
        # ethtool collector names it
        *(s(metric, f'job="node-exporter", instance="{ne[host]}", device="{dev}"',
            t.ramp(start, per_minute, minutes))
          for metric, host, dev, start, per_minute in [
              ("node_network_receive_drop_total", "gpu-a", "ens1np0", 1000, 120),
              ("node_network_receive_drop_total", "gpu-a", "eth0", 0, 60),
              ("node_network_receive_drop_total", "gpu-b", "ens1np0", 0, 30),
              ("node_network_receive_drop_total", "gpu-c", "ens1np0", 0, 600),
              ("node_ethtool_received_discards_phy", "gpu-b", "ens1np0", 500, 60),
          ]),
        gpu_info("gpu-a", 0, "0000:1b:00.0", "00000000:1B:00.0",
                 "NVIDIA H100 80GB HBM3", UUID_A0),
        gpu_info("gpu-a", 1, "0000:43:00.0", "00000000:43:00.0",
                 "NVIDIA H100 80GB HBM3", UUID_A1),
        gpu_info("gpu-b", 0, "0000:1b:00.0", "00000000:1B:00.0"),
        s("roce_gpu_nic_path_info", f'{J}, instance="gpu-a:9879", gpu="0", device="mlx5_0", '
          'path="PIX", nearest="true"', t.const(1, minutes)),
        s("roce_gpu_nic_path_info", f'{J}, instance="gpu-a:9879", gpu="0", device="mlx5_2", '
          'path="PHB", nearest="false"', t.const(1, minutes)),
        dcgm("DCGM_FI_PROF_PCIE_RX_BYTES", "gpu-a", 0, "00000000:1B:00.0", UUID_A0, 5e9),
        dcgm("DCGM_FI_PROF_PCIE_RX_BYTES", "gpu-a", 1, "00000000:43:00.0", UUID_A1, 1e9),
        dcgm("DCGM_FI_PROF_PCIE_RX_BYTES", "gpu-b", 0, "00000000:1B:00.0", uuid_b0, 7e9,
             host_label="hostname"),
        dcgm("DCGM_FI_PROF_PCIE_RX_BYTES", "gpu-c", 0, "00000000:1B:00.0",
             "GPU-5d0e9b44-12aa-4c3b-9f7e-e0a1b2c3d4e5", 9e9),
        dcgm("DCGM_FI_PROF_PCIE_TX_BYTES", "gpu-a", 0, "00000000:1B:00.0", UUID_A0, 4e9),
    ]
    port = {"job": "roce_exporter", "port": "1"}
    netdevs = [
        (dict(port, instance="gpu-a:9100", device="ens1np0", rdma_device="mlx5_0",
              roce_instance="gpu-a:9879"), 1),
        (dict(port, instance="gpu-a:9100", device="ens2np0", rdma_device="mlx5_1",
              roce_instance="gpu-a:9879"), 1),
        (dict(port, instance="10.0.0.12:9100", device="ens1np0", rdma_device="mlx5_0",
              roce_instance="gpu-b:9879"), 1),
    ]
    gpus = {
        ("gpu-a", 0): {"job": "roce_exporter", "instance": "gpu-a:9879", "gpu": "0",
                       "roce_instance": "gpu-a:9879", "roce_gpu": "0",
                       "pci_bus_id": "00000000:1B:00.0", "UUID": UUID_A0,
                       "Hostname": "gpu-a", "hostname": "gpu-a"},
        ("gpu-a", 1): {"job": "roce_exporter", "instance": "gpu-a:9879", "gpu": "1",
                       "roce_instance": "gpu-a:9879", "roce_gpu": "1",
                       "pci_bus_id": "00000000:43:00.0", "UUID": UUID_A1,
                       "Hostname": "gpu-a", "hostname": "gpu-a"},
        ("gpu-b", 0): {"job": "roce_exporter", "instance": "gpu-b:9879", "gpu": "0",
                       "roce_instance": "gpu-b:9879", "roce_gpu": "0",
                       "pci_bus_id": "00000000:1B:00.0",
                       "Hostname": "gpu-b", "hostname": "gpu-b"},
    }

    def dcgm_labels(host, gpu, bus_id, uuid, host_label="Hostname", **extra):
        return dict(gpu=str(gpu), UUID=uuid, pci_bus_id=bus_id, device=f"nvidia{gpu}",
                    modelName="NVIDIA H100 80GB HBM3", DCGM_FI_DRIVER_VERSION="550.54.15",
                    job="nvidia-dcgm-exporter", instance=f"10.244.{ord(host[-1]) - 96}.17:9400",
                    container="trainer", namespace="ml", pod="nccl-test-0",
                    **{host_label: host}, **extra)

    def node_labels(host, dev, **extra):
        return dict(job="node-exporter", instance=ne[host], device=dev, **extra)

    return [{
        "name": "joins: node_exporter's netdevs and dcgm-exporter's GPUs with ours",
        "series": series,
        "tests": [],
        "expr_tests": [
            # one series per RoCE netdev, as node_exporter names it (gpu-b
            # through its nodename; gpu-c has no roce_exporter; eth0 no RDMA
            # port; gpu-a's two node_exporter jobs give one)
            ("10m", NODE_EXPORTER_JOIN, netdevs),
            # the one-step joins docs/deploy.md shows
            ("10m", "rate(node_network_receive_drop_total[5m])\n"
                    "* on (instance, device) group_left (roce_instance, rdma_device, port)\n"
                    + NODE_EXPORTER_JOIN,
             [(node_labels("gpu-a", "ens1np0", roce_instance="gpu-a:9879",
                           rdma_device="mlx5_0", port="1"), 2),
              (node_labels("gpu-b", "ens1np0", roce_instance="gpu-b:9879",
                           rdma_device="mlx5_0", port="1"), 0.5)]),
            ("10m", "rate(node_ethtool_received_discards_phy[5m])\n"
                    "* on (instance, device) group_left (roce_instance, rdma_device, port)\n"
                    + NODE_EXPORTER_JOIN,
             [(node_labels("gpu-b", "ens1np0", roce_instance="gpu-b:9879",
                           rdma_device="mlx5_0", port="1"), 1)]),
            # the congestion dashboard's node_exporter panel
            ("10m", dashboard_query(scrape, "roce-congestion.json",
                                    "Kernel drops and errors (node_exporter)"),
             [(node_labels("gpu-a", "ens1np0", roce_instance="gpu-a:9879",
                           rdma_device="mlx5_0", port="1"), 2),
              (node_labels("gpu-b", "ens1np0", roce_instance="gpu-b:9879",
                           rdma_device="mlx5_0", port="1"), 0.5)]),
            ("10m", DCGM_JOIN, [(gpus[k], 1) for k in sorted(gpus)]),
            # dcgm-exporter up to 4.5.x (Hostname), newer (hostname), and
            # by UUID where NVML named our GPUs: gpu-c has no roce_exporter,
            # gpu-b's GPU 0 shares gpu-a's GPU 0 address and joins its own
            ("10m", "DCGM_FI_PROF_PCIE_RX_BYTES\n"
                    "* on (Hostname, pci_bus_id) group_left (roce_instance, roce_gpu)\n"
                    + DCGM_JOIN,
             [(dcgm_labels("gpu-a", 0, "00000000:1B:00.0", UUID_A0, roce_instance="gpu-a:9879",
                           roce_gpu="0"), 5e9),
              (dcgm_labels("gpu-a", 1, "00000000:43:00.0", UUID_A1, roce_instance="gpu-a:9879",
                           roce_gpu="1"), 1e9)]),
            ("10m", "DCGM_FI_PROF_PCIE_RX_BYTES\n"
                    "* on (hostname, pci_bus_id) group_left (roce_instance, roce_gpu)\n"
                    + DCGM_JOIN,
             [(dcgm_labels("gpu-b", 0, "00000000:1B:00.0", uuid_b0, host_label="hostname",
                           roce_instance="gpu-b:9879", roce_gpu="0"), 7e9)]),
            ("10m", "DCGM_FI_PROF_PCIE_RX_BYTES\n"
                    "* on (UUID) group_left (roce_instance, roce_gpu)\n" + DCGM_JOIN,
             [(dcgm_labels("gpu-a", 0, "00000000:1B:00.0", UUID_A0, roce_instance="gpu-a:9879",
                           roce_gpu="0"), 5e9),
              (dcgm_labels("gpu-a", 1, "00000000:43:00.0", UUID_A1, roce_instance="gpu-a:9879",
                           roce_gpu="1"), 1e9)]),
            # ours with dcgm-exporter's keys: the nearest NIC of each GPU
            ("10m", 'roce_gpu_nic_path_info{nearest="true"}\n'
                    "* on (job, instance, gpu) group_left (pci_bus_id, UUID)\n" + DCGM_JOIN,
             [({"job": "roce_exporter", "instance": "gpu-a:9879", "gpu": "0",
                "device": "mlx5_0", "path": "PIX", "nearest": "true",
                "pci_bus_id": "00000000:1B:00.0", "UUID": UUID_A0}, 1)]),
            # the topology dashboard's dcgm-exporter panel: received bytes
            # by Hostname, by hostname, and transmitted by Hostname
            ("10m", dashboard_query(scrape, "roce-topology.json",
                                    "GPU PCIe throughput (dcgm-exporter)", 0),
             [(gpus[("gpu-a", 0)], 5e9), (gpus[("gpu-a", 1)], 1e9)]),
            ("10m", dashboard_query(scrape, "roce-topology.json",
                                    "GPU PCIe throughput (dcgm-exporter)", 1),
             [(gpus[("gpu-b", 0)], 7e9)]),
            ("10m", dashboard_query(scrape, "roce-topology.json",
                                    "GPU PCIe throughput (dcgm-exporter)", 2),
             [(gpus[("gpu-a", 0)], 4e9)]),
        ],
    }]


def rules_by_name(params):
    out = {}
    for _, gs in generate.groups(params):
        for g in gs:
            for r in g["rules"]:
                if "alert" in r:
                    out[r["alert"]] = r
    return out


def eval_order(params):
    """Every group, the recording groups first: promtool evaluates groups
    in this order at each step (unlisted, in map order), so each alert sees
    the records of the same evaluation, as the mixin's files order them.
    Prometheus itself runs groups on their own timers: an alert reads records
    at most one evaluation old there."""
    gs = [g for _, groups in generate.groups(params) for g in groups]
    records = [g["name"] for g in gs if all("record" in r for r in g["rules"])]
    return records + [g["name"] for g in gs if g["name"] not in records]


TOKEN = re.compile(r"\{\{(.*?)\}\}")


def render(template, labels, value):
    """The alert templates' subset of Go templates: `$labels.x`, `$value`
    with a pipe, `if $labels.x` ... `end`, and the runbook URL's
    `with query ...` ... `end` (an exporter that is up)."""
    out = []
    stack = []  # True: emitting
    pos = 0
    for m in TOKEN.finditer(template):
        if all(stack):
            out.append(template[pos:m.start()])
        pos = m.end()
        tok = m.group(1).strip()
        if tok.startswith("if "):
            stack.append(bool(labels.get(tok[3:].strip().removeprefix("$labels."), "")))
        elif tok.startswith("with query"):
            stack.append(True)
            if all(stack):
                out.append(UP_INSTANCE)
            stack[-1] = False  # the body ({{ . | first | label ... }}) is replaced
        elif tok == "end":
            stack.pop()
        elif not all(stack):
            continue
        elif tok.startswith("$labels."):
            out.append(labels.get(tok[len("$labels."):], ""))
        elif tok.startswith("$value"):
            if value is None:
                raise SystemExit(f"a value text is needed for: {template}")
            out.append(value)
        else:
            raise SystemExit(f"unsupported template action {tok!r} in {template}")
    out.append(template[pos:])
    return "".join(out)


def build(scrape=60, rule_files=None):
    params = dict(generate.default_params(), scrape_interval=scrape)
    rules = rules_by_name(params)
    covered = set()
    tests = []
    for group in groups(scrape):
        cases = []
        for eval_time, name, expected in group["tests"]:
            at = evaluated_at(seconds(eval_time))
            if at % scrape == 0:
                raise SystemExit(f"{group['name']}: {name} at {eval_time} is evaluated at "
                                 f"{at} s, on a sample of the {scrape} s interval: "
                                 "move the case")
            rule = rules[name]
            if expected:
                covered.add(name)
            exp = []
            for labels, value in expected:
                # an empty label is no label in Prometheus
                all_labels = {k: v for k, v in labels.items() if v != ""}
                all_labels.update(rule.get("labels", {}))
                ann = {k: render(v, all_labels, value) for k, v in rule["annotations"].items()}
                exp.append({"exp_labels": all_labels, "exp_annotations": ann})
            cases.append({"eval_time": eval_time, "alertname": name, "exp_alerts": exp})
        exprs = []
        for eval_time, expr, expected in group.get("expr_tests", []):
            at = evaluated_at(seconds(eval_time))
            if at % scrape == 0:
                raise SystemExit(f"{group['name']}: {expr} at {eval_time} is evaluated on "
                                 f"a sample of the {scrape} s interval: move the case")
            # rate()'s extrapolation leaves float residue: compared at 1e-3
            exprs.append({"expr": f"round({expr}, 0.001)", "eval_time": eval_time, "exp_samples": [
                {"labels": "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                 + "}", "value": float(value)} for labels, value in expected]})
        test = {
            "name": f"{group['name']} ({scrape} s scrape interval)",
            "interval": f"{scrape}s",
            "input_series": group["series"],
        }
        if cases:
            test["alert_rule_test"] = cases
        if exprs:
            test["promql_expr_test"] = exprs
        tests.append(test)
    missing = set(rules) - covered
    if missing:
        raise SystemExit(f"alerts without a firing test case: {sorted(missing)}")
    doc = {
        "rule_files": rule_files or COMMITTED_RULE_FILES,
        "evaluation_interval": f"{EVALUATION}s",
        "group_eval_order": eval_order(params),
        "tests": tests,
    }
    return ("# Generated by tests/monitoring/gen_rule_tests.py: edit the generator.\n"
            "# Run: promtool test rules tests/monitoring/rules.test.yml\n"
            + generate.yaml_dump(doc) + "\n")


def main():
    with open(os.path.join(HERE, "rules.test.yml"), "w", encoding="utf-8") as f:
        f.write(build())


if __name__ == "__main__":
    main()
