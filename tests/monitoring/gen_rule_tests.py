#!/usr/bin/env python3
"""Writes the `promtool test rules` cases of alerts/ (python3, stdlib only):
tests/monitoring/rules.test.yml for the committed rule files (60 s scrape
interval), and the same cases for the rule files generated at any other
scrape interval (run.py static runs them at 15 s, 30 s and 60 s).

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

import math
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "alerts"))
import generate  # noqa: E402  (alerts/generate.py)

EVALUATION = 17  # seconds; prime, so evaluations drift across the samples
SCRAPE_INTERVALS = (15, 30, 60)
COMMITTED_RULE_FILES = ["../../alerts/roce_exporter.rules.yml",
                        "../../alerts/roce_exporter.fleet.rules.yml"]

J = 'job="roce_exporter"'
N1 = J + ', instance="n1:9879"'
N2 = J + ', instance="n2:9879"'
N3 = J + ', instance="n3:9879"'
BASE1 = {"job": "roce_exporter", "instance": "n1:9879"}
BASE2 = {"job": "roce_exporter", "instance": "n2:9879"}
BASE3 = {"job": "roce_exporter", "instance": "n3:9879"}
# The exporter that is up in every group (runbook URLs of alerts without a
# live instance point at it).
UP_INSTANCE = "n2:9879"


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
    rules = [r for r in generate.load_rules()["rules"] if generate.notifies(r)]
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
        name = generate.alert_name(rid)
        tests += [
            ("1m", name, []),
            ("8m", name, [(dict(BASE1, **labels), None)]),
            ("19m", name, []),
        ]
    out.append({"name": "findings", "series": series, "tests": tests})

    # n1 loses one of its two devices at minute 10; n3 loses its only one;
    # n2 keeps its device. The drop is remembered for nic_count_window.
    window = seconds(generate.DEFAULTS["nic_count_window"]) // 60
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

    fleet = 80
    out.append({
        "name": "fleet inconsistencies",
        "series": [
            s("up", N2, t.const(1, fleet)),
            s("roce_device_info", N1 + ', device="mlx5_0", hca_type="MT4129", fw_version="28.39.1002"',
              t.const(1, fleet)),
            s("roce_device_info", N2 + ', device="mlx5_0", hca_type="MT4129", fw_version="28.40.1000"',
              t.const(1, fleet)),
            s("roce_device_info", N1 + ', device="mlx5_1", hca_type="MT4125", fw_version="22.39.1002"',
              t.const(1, fleet)),
            s("roce_device_info", N2 + ', device="mlx5_1", hca_type="MT4125", fw_version="22.39.1002"',
              t.const(1, fleet)),
            s("roce_device_info", N1 + ', device="rxe0", hca_type="", fw_version=""',
              t.const(1, fleet)),
            s("roce_netdev_mtu_bytes", N1 + ', netdev="ens1np0", ' + P0, t.const(9000, fleet)),
            s("roce_netdev_mtu_bytes", N2 + ', netdev="ens1np0", ' + P0, t.const(4200, fleet)),
            s("roce_pfc_enabled", N1 + ', netdev="ens1np0", ' + P0 + ', priority="3"',
              t.const(1, fleet)),
            s("roce_pfc_enabled", N2 + ', netdev="ens1np0", ' + P0 + ', priority="3"',
              t.const(0, fleet)),
            s("roce_pfc_enabled", N1 + ', netdev="ens1np0", ' + P0 + ', priority="4"',
              t.const(0, fleet)),
            s("roce_pfc_enabled", N2 + ', netdev="ens1np0", ' + P0 + ', priority="4"',
              t.const(0, fleet)),
            # one node trusts PCP, the other DSCP (roce_pfc_enabled above
            # differs on priority 3 too: both are QoS drift)
            s("roce_qos_trust_info", N1 + ', netdev="ens1np0", ' + P0 + ', trust="dscp"',
              t.const(1, fleet)),
            s("roce_qos_trust_info", N2 + ', netdev="ens1np0", ' + P0 + ', trust="pcp"',
              t.const(1, fleet)),
            s("roce_gid_info", N1 + ", " + P0 + ', index="3", type="RoCE v2", '
              'family="ipv4_mapped", gid="::ffff:10.0.0.1", netdev="ens1np0"', t.const(1, fleet)),
            s("roce_gid_info", N2 + ", " + P0 + ', index="3", type="IB/RoCE v1", '
              'family="ipv4_mapped", gid="::ffff:10.0.0.2", netdev="ens1np0"', t.const(1, fleet)),
            s("roce_gid_info", N1 + ", " + P0 + ', index="0", type="IB/RoCE v1", '
              'family="ipv6_link_local", gid="fe80::1", netdev="ens1np0"', t.const(1, fleet)),
            s("roce_gid_info", N2 + ", " + P0 + ', index="0", type="IB/RoCE v1", '
              'family="ipv6_link_local", gid="fe80::2", netdev="ens1np0"', t.const(1, fleet)),
        ],
        "tests": [
            ("50m", "RoceQosConfigDrift", []),
            ("70m", "RoceQosConfigDrift",
             [({"job": "roce_exporter", "config": "pfc", "priority": "3",
                "hca_type": "MT4129"}, "2"),
              ({"job": "roce_exporter", "config": "trust", "hca_type": "MT4129"}, "2")]),
            ("50m", "RoceFirmwareDrift", []),
            ("70m", "RoceFirmwareDrift", [({"job": "roce_exporter", "hca_type": "MT4129"}, "2")]),
            ("70m", "RoceMtuInconsistent", [({"job": "roce_exporter"}, "2")]),
            ("70m", "RocePfcPriorityInconsistent",
             [({"job": "roce_exporter", "priority": "3"}, "1")]),
            ("70m", "RoceGidTypeInconsistent", [({"job": "roce_exporter", "index": "3"}, "2")]),
        ],
    })
    # Two NIC generations in one fleet: ConnectX-7 (MT4129) on n1 and n2,
    # ConnectX-6 Dx (MT4125) on n3, each generation with its own ETS and
    # DCQCN defaults. Only a difference within a generation is drift: n2's
    # rpg_time_reset differs from n1's.
    ets7 = 'prio_tc="0,0,0,3,0,0,6,0", tc_tsa="ets,ets,ets,ets,ets,ets,strict,ets", tc_bw="50,0,0,50,0,0,0,0"'
    ets6 = 'prio_tc="1,0,2,3,4,5,6,7", tc_tsa="ets,ets,ets,ets,ets,ets,ets,ets", tc_bw="13,12,13,12,13,12,13,12"'
    gens = [(N1, "MT4129", ets7, 1, 300), (N2, "MT4129", ets7, 1, 600),
            (N3, "MT4125", ets6, 10, 300)]
    series = [s("up", N2, t.const(1, fleet))]
    for n, hca, ets, min_rate, reset in gens:
        series += [
            s("roce_device_info", n + f', device="mlx5_0", driver="mlx5_core", hca_type="{hca}", '
              'fw_version="1"', t.const(1, fleet)),
            s("roce_pfc_enabled", n + ', netdev="ens1np0", ' + P0 + ', priority="3"',
              t.const(1, fleet)),
            s("roce_qos_ets_info", n + ', netdev="ens1np0", ' + P0 + ", " + ets, t.const(1, fleet)),
            s("roce_qos_buffer_info", n + ', netdev="ens1np0", ' + P0
              + f', prio_buffer="0,0,0,1,0,0,0,0", buffer_size="{min_rate * 130944},130944,0,0,0,0,0,0"',
              t.const(1, fleet)),
            s("roce_dcqcn_parameter", n + ', netdev="ens1np0", ' + P0
              + ', role="rp", parameter="rpg_min_rate", source="sysfs"', t.const(min_rate, fleet)),
            s("roce_dcqcn_parameter", n + ', netdev="ens1np0", ' + P0
              + ', role="rp", parameter="rpg_time_reset", source="sysfs"', t.const(reset, fleet)),
        ]
    out.append({
        "name": "two NIC generations: drift within a generation only",
        "series": series,
        "tests": [
            ("70m", "RoceQosConfigDrift",
             [({"job": "roce_exporter", "config": "dcqcn_parameters", "role": "rp",
                "parameter": "rpg_time_reset", "source": "sysfs", "hca_type": "MT4129",
                "driver": "mlx5_core"}, "2")]),
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
            s("roce_pfc_enabled", N1 + ', netdev="ens1np0", ' + P0 + ', priority="3"',
              t.const(1, fleet)),
            s("roce_pfc_enabled", N2 + ', netdev="ens1np0", ' + P0 + ', priority="3"',
              t.const(1, fleet)),
            s("roce_device_info", N1 + ', device="mlx5_0", hca_type="MT4129", fw_version="28.39.1002"',
              t.const(1, fleet)),
            s("roce_device_info", N2 + ', device="mlx5_0", hca_type="MT4129", fw_version="28.39.1002"',
              t.const(1, fleet)),
            s("roce_qos_trust_info", N1 + ', netdev="ens1np0", ' + P0 + ', trust="dscp"',
              t.const(1, fleet)),
            s("roce_qos_trust_info", N2 + ', netdev="ens1np0", ' + P0 + ', trust="dscp"',
              t.const(1, fleet)),
            s("roce_qos_ets_info", N1 + ', netdev="ens1np0", ' + P0
              + ', prio_tc="0,0,0,3,0,0,6,0", tc_tsa="ets,ets,ets,ets,ets,ets,strict,ets", '
              'tc_bw="50,0,0,50,0,0,0,0"', t.const(1, fleet)),
            s("roce_qos_ets_info", N2 + ', netdev="ens1np0", ' + P0
              + ', prio_tc="0,0,0,3,0,0,6,0", tc_tsa="ets,ets,ets,ets,ets,ets,strict,ets", '
              'tc_bw="50,0,0,50,0,0,0,0"', t.const(1, fleet)),
            # a management netdev without an RDMA port: not compared.
            s("roce_qos_trust_info", N2 + ', netdev="eth0", device="", port="", trust="pcp"',
              t.const(1, fleet)),
        ],
        "tests": [
            ("70m", "RoceQosConfigDrift", []),
            ("70m", "RoceMtuInconsistent", []),
            ("70m", "RocePfcPriorityInconsistent", []),
            ("70m", "RoceFirmwareDrift", []),
            ("70m", "RoceGidTypeInconsistent", []),
        ],
    })
    return out


def rules_by_name(params):
    out = {}
    for _, gs in generate.groups(params):
        for g in gs:
            for r in g["rules"]:
                if "alert" in r:
                    out[r["alert"]] = r
    return out


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
        tests.append({
            "name": f"{group['name']} ({scrape} s scrape interval)",
            "interval": f"{scrape}s",
            "input_series": group["series"],
            "alert_rule_test": cases,
        })
    missing = set(rules) - covered
    if missing:
        raise SystemExit(f"alerts without a firing test case: {sorted(missing)}")
    doc = {
        "rule_files": rule_files or COMMITTED_RULE_FILES,
        "evaluation_interval": f"{EVALUATION}s",
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
