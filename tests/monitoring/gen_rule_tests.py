#!/usr/bin/env python3
"""Writes tests/monitoring/rules.test.yml, the `promtool test rules` cases of
alerts/*.rules.yml (python3, stdlib only).

Each alert gets input series that fire it and series that must not (a
counter reset among them for every counter-based alert). The expected
labels and the expected rendering of `$value` are written by hand below;
summaries and descriptions are the alert's templates with `{{ $labels.x }}`
and `{{ $value ... }}` replaced by those, so promtool checks that the
templates name the right labels and the measured value.

    python3 tests/monitoring/gen_rule_tests.py      # rewrite rules.test.yml
"""

import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "alerts"))
import generate  # noqa: E402  (alerts/generate.py)

J = 'job="roce_exporter"'
N1 = J + ', instance="n1:9879"'
N2 = J + ', instance="n2:9879"'
P0 = 'device="mlx5_0", port="1"'
P1 = 'device="mlx5_1", port="1"'
P2 = 'device="mlx5_2", port="1"'
BASE1 = {"job": "roce_exporter", "instance": "n1:9879"}
BASE2 = {"job": "roce_exporter", "instance": "n2:9879"}


def s(name, labels, values):
    return {"series": f"{name}{{{labels}}}", "values": values}


def port(extra=None, base=BASE1, device="mlx5_0"):
    d = dict(base, device=device, port="1")
    d.update(extra or {})
    return d


# (eval_time, alertname, [(labels, value text)]): an empty list asserts that
# nothing fires.
GROUPS = [
    {
        "name": "exporter health",
        "series": [
            s("up", N1, "0x10"),
            s("up", N2, "1x10"),
            s("roce_collector_success", N1 + ', collector="ethtool"', "0x15"),
            s("roce_collector_success", N1 + ', collector="rdma"', "1x15"),
            # n1 samples every minute; n2's sampler hangs at t=0.
            s("roce_sample_timestamp_seconds", N1, "0+60x15"),
            s("roce_sample_timestamp_seconds", N2, "0x15"),
            s("roce_sample_interval_seconds", N1, "5x15"),
            s("roce_sample_interval_seconds", N2, "5x15"),
        ],
        "tests": [
            ("4m", "RoceExporterDown", []),
            ("6m", "RoceExporterDown", [(BASE1, None)]),
            ("9m", "RoceCollectorFailing", []),
            ("11m", "RoceCollectorFailing", [(dict(BASE1, collector="ethtool"), None)]),
            ("3m", "RoceSampleStale", []),
            ("10m", "RoceSampleStale", [(BASE2, "10m 0s")]),
        ],
    },
    {
        "name": "pfc storm and pause storm detector",
        "series": [
            # 30 s paused per minute: ratio 0.5.
            s("roce_pfc_pause_duration_seconds_total",
              N1 + ', netdev="ens1np0", ' + P0 + ', priority="3", direction="tx"', "0+30x10"),
            # 6 s per minute: ratio 0.1, below 0.2.
            s("roce_pfc_pause_duration_seconds_total",
              N1 + ', netdev="ens1np0", ' + P0 + ', priority="4", direction="tx"', "0+6x10"),
            # driver reload at 6m: the counter restarts from 0; still 0.1.
            s("roce_pfc_pause_duration_seconds_total",
              N1 + ', netdev="ens1np0", ' + P0 + ', priority="3", direction="rx"',
              "100+6x5 0+6x4"),
            s("roce_pause_storm_events_total",
              N1 + ', netdev="ens1np0", ' + P0 + ', severity="error"',
              "0 0 0 1 1 1 1 1 1 1 1 1"),
            s("roce_pause_storm_events_total",
              N1 + ', netdev="ens2np0", ' + P1 + ', severity="error"',
              "5 5 5 0 0 0 0 0 0 0 0 0"),
        ],
        "tests": [
            ("1m", "RocePfcStorm", []),
            ("8m", "RocePfcStorm", [
                (port({"netdev": "ens1np0", "priority": "3", "direction": "tx"}), "50%"),
            ]),
            ("2m", "RocePauseStormDetected", []),
            ("5m", "RocePauseStormDetected", [
                (port({"netdev": "ens1np0", "storm_severity": "error"}), "1"),
            ]),
            ("11m", "RocePauseStormDetected", []),
        ],
    },
    {
        "name": "congestion, drops and retransmissions",
        "series": [
            # 20000/s fires, 1000/s does not, a reset of a large counter does not.
            s("roce_cnp_sent_total", N1 + ", " + P0, "0+1200000x20"),
            s("roce_cnp_sent_total", N1 + ", " + P1, "0+60000x20"),
            s("roce_cnp_sent_total", N1 + ", " + P2, "900000000+60000x8 0+60000x11"),
            s("roce_cnp_handled_total", N1 + ", " + P1, "0+60000x20"),
            s("roce_ecn_marked_packets_total", N1 + ", " + P0, "0+1200000x20"),
            s("roce_ecn_marked_packets_total", N1 + ", " + P2, "900000000+60000x8 0+60000x11"),
            # 2/s fires, 0.5/s does not.
            s("roce_out_of_buffer_drops_total", N1 + ", " + P0, "0+120x20"),
            s("roce_out_of_buffer_drops_total", N1 + ", " + P1, "0+30x20"),
            s("roce_out_of_buffer_drops_total", N1 + ", " + P2, "5000000+30x8 0+30x11"),
            s("roce_netdev_discards_total",
              N1 + ', netdev="ens1np0", ' + P0 + ', reason="rx_no_buffer", priority="3"',
              "0+120x20"),
            s("roce_netdev_discards_total",
              N1 + ', netdev="ens1np0", ' + P0 + ', reason="rx_port", priority=""', "0+30x20"),
            s("roce_netdev_discards_total",
              N1 + ', netdev="ens2np0", ' + P1 + ', reason="rx_port", priority=""',
              "5000000+30x8 0+30x11"),
            # 20/s fires (either counter), 1/s does not.
            s("roce_retransmissions_total", N1 + ", " + P0, "0+1200x20"),
            s("roce_local_ack_timeout_errors_total", N1 + ", " + P1, "0+1200x20"),
            s("roce_retransmissions_total", N1 + ", " + P2, "900000+60x8 0+60x11"),
            s("roce_local_ack_timeout_errors_total", N1 + ", " + P2, "0+60x20"),
            s("roce_out_of_sequence_packets_total", N1 + ", " + P0, "0+1200x20"),
            s("roce_packet_sequence_errors_total", N1 + ", " + P1, "0+1200x20"),
            s("roce_out_of_sequence_packets_total", N1 + ", " + P2, "900000+60x8 0+60x11"),
        ],
        "tests": [
            ("9m", "RoceCnpSpike", []),
            ("16m", "RoceCnpSpike", [(port(), "20k")]),
            ("16m", "RoceEcnMarkSpike", [(port(), "20k")]),
            ("4m", "RoceOutOfBufferDrops", []),
            ("16m", "RoceOutOfBufferDrops", [(port(), "2")]),
            ("16m", "RoceNetdevDiscards", [
                (port({"netdev": "ens1np0", "reason": "rx_no_buffer"}), "2"),
            ]),
            ("16m", "RoceRetransmissions", [(port(), "20"), (port(device="mlx5_1"), "20")]),
            ("16m", "RoceSequenceErrors", [(port(), "20"), (port(device="mlx5_1"), "20")]),
        ],
    },
    {
        "name": "link health",
        "series": [
            # 400 Gb/s: 4e11 bit/s; 1 error/s is a BER of 2.5e-12, 0.1/s 2.5e-13.
            s("roce_port_rate_bytes_per_second", N1 + ", " + P0, "50000000000x20"),
            s("roce_port_rate_bytes_per_second", N1 + ", " + P1, "25000000000x20"),
            s("roce_port_rate_bytes_per_second", N1 + ", " + P2, "0x20"),
            s("roce_port_rate_bytes_per_second", N2 + ", " + P0, "50000000000x20"),
            s("roce_port_symbol_errors_total", N1 + ", " + P0, "0+60x20"),
            s("roce_port_symbol_errors_total", N1 + ", " + P1, "0+3x20"),
            s("roce_port_symbol_errors_total", N1 + ", " + P2, "0+600x20"),
            s("roce_port_symbol_errors_total", N2 + ", " + P0, "1000000+3x8 0+3x11"),
            s("roce_port_link_downed_total", N1 + ", " + P0, "0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1"),
            s("roce_port_link_downed_total", N1 + ", " + P1, "3 3 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"),
            s("roce_port_up", N1 + ", " + P0, "1x20"),
            s("roce_port_up", N1 + ", " + P1, "1x20"),
            s("roce_port_up", N1 + ", " + P2, "0x20"),
            s("roce_port_up", N2 + ", " + P0, "1 0 0 1x17"),
        ],
        "tests": [
            ("9m", "RoceSymbolErrors", []),
            ("16m", "RoceSymbolErrors", [(port(), "2.5e-12")]),
            ("5m", "RoceLinkFlap", [(port(), "1")]),
            ("16m", "RoceLinkFlap", []),
            ("4m", "RocePortDown", []),
            ("6m", "RocePortDown", [(port(device="mlx5_2"), None)]),
            ("10m", "RoceLinkRateBelowExpected", []),
            ("16m", "RoceLinkRateBelowExpected", [(port(device="mlx5_1"), "25G")]),
        ],
    },
    {
        "name": "topology and findings",
        "series": [
            s("roce_pcie_link_downtrained",
              N1 + ', pci_address="0000:04:00.0", device="mlx5_0", upstream="0000:02:00.0", '
              'aspect="width"', "1x20"),
            s("roce_pcie_link_downtrained",
              N1 + ', pci_address="0000:04:00.0", device="mlx5_0", upstream="0000:02:00.0", '
              'aspect="speed"', "0x20"),
            s("roce_gpu_nearest_nic_info", N1 + ', gpu="0", device="mlx5_4", path="SYS"', "1x20"),
            s("roce_gpu_nearest_nic_info", N1 + ', gpu="1", device="mlx5_1", path="PIX"', "1x20"),
            s("roce_gpudirect_rdma_available", N1, "0x20"),
            s("roce_gpudirect_rdma_available", N2, "1x20"),
            s("roce_finding", N1 + ', rule="port_down", severity="critical", device="mlx5_0", '
              'port="1", netdev="ens1np0", gpu=""', "1x20"),
            s("roce_finding", N1 + ', rule="link_flap", severity="warning", device="mlx5_1", '
              'port="1", netdev="ens2np0", gpu=""', "1x20"),
        ],
        "tests": [
            ("14m", "RocePcieDowntrained", []),
            ("16m", "RocePcieDowntrained", [(dict(BASE1, pci_address="0000:04:00.0",
                                                  device="mlx5_0", upstream="0000:02:00.0",
                                                  aspect="width"), None)]),
            ("16m", "RoceGpuNicPathSys", [(dict(BASE1, gpu="0", device="mlx5_4", path="SYS"),
                                           None)]),
            ("16m", "RoceGpuDirectNotReady", [(BASE1, None)]),
            ("4m", "RoceCriticalFinding", []),
            ("6m", "RoceCriticalFinding", [(dict(BASE1, rule="port_down", severity="critical",
                                                 device="mlx5_0", port="1", netdev="ens1np0",
                                                 gpu=""), None)]),
        ],
    },
    {
        "name": "probe failures",
        "series": [
            s("roce_probe_requests_total", N1 + ", " + P0, "0+60x30"),
            s("roce_probe_failures_total", N1 + ", " + P0 + ', reason="timeout"', "0+6x30"),
            s("roce_probe_requests_total", N1 + ", " + P1, "0+60x30"),
            s("roce_probe_failures_total", N1 + ", " + P1 + ', reason="timeout"', "0+1x30"),
            s("roce_probe_requests_total", N1 + ", " + P2, "100000+60x10 0+60x19"),
            s("roce_probe_failures_total", N1 + ", " + P2 + ', reason="timeout"',
              "5000+1x10 0+1x19"),
        ],
        "tests": [
            ("9m", "RoceProbeFailing", []),
            ("25m", "RoceProbeFailing", [(port(), "10%")]),
        ],
    },
    {
        # 60 probes per 2 minutes; mlx5_0's RTT moves from (0.1 ms, 1 ms] to
        # (1 ms, 10 ms] after one day, mlx5_1's stays.
        "name": "probe latency regression",
        "interval": "2m",
        "series": [
            s("roce_probe_rtt_seconds_bucket", N1 + ", " + P0 + ', gid_index="3", op="write", le="0.0001"',
              "0x780"),
            s("roce_probe_rtt_seconds_bucket", N1 + ", " + P0 + ', gid_index="3", op="write", le="0.001"',
              "0+60x720 43200x60"),
            s("roce_probe_rtt_seconds_bucket", N1 + ", " + P0 + ', gid_index="3", op="write", le="0.01"',
              "0+60x780"),
            s("roce_probe_rtt_seconds_bucket", N1 + ", " + P0 + ', gid_index="3", op="write", le="+Inf"',
              "0+60x780"),
            s("roce_probe_rtt_seconds_bucket", N1 + ", " + P1 + ', gid_index="3", op="write", le="0.0001"',
              "0x780"),
            s("roce_probe_rtt_seconds_bucket", N1 + ", " + P1 + ', gid_index="3", op="write", le="0.001"',
              "0+60x780"),
            s("roce_probe_rtt_seconds_bucket", N1 + ", " + P1 + ', gid_index="3", op="write", le="0.01"',
              "0+60x780"),
            s("roce_probe_rtt_seconds_bucket", N1 + ", " + P1 + ', gid_index="3", op="write", le="+Inf"',
              "0+60x780"),
        ],
        "tests": [
            ("23h", "RoceProbeLatencyRegression", []),
            ("26h", "RoceProbeLatencyRegression", [(port({"op": "write"}), "9.91ms")]),
        ],
    },
    {
        "name": "fleet inconsistencies",
        "series": [
            s("roce_device_info", N1 + ', device="mlx5_0", hca_type="MT4129", fw_version="28.39.1002"',
              "1x80"),
            s("roce_device_info", N2 + ', device="mlx5_0", hca_type="MT4129", fw_version="28.40.1000"',
              "1x80"),
            s("roce_device_info", N1 + ', device="mlx5_1", hca_type="MT4125", fw_version="22.39.1002"',
              "1x80"),
            s("roce_device_info", N2 + ', device="mlx5_1", hca_type="MT4125", fw_version="22.39.1002"',
              "1x80"),
            s("roce_device_info", N1 + ', device="rxe0", hca_type="", fw_version=""', "1x80"),
            s("roce_netdev_mtu_bytes", N1 + ', netdev="ens1np0", ' + P0, "9000x80"),
            s("roce_netdev_mtu_bytes", N2 + ', netdev="ens1np0", ' + P0, "4200x80"),
            s("roce_pfc_enabled", N1 + ', netdev="ens1np0", ' + P0 + ', priority="3"', "1x80"),
            s("roce_pfc_enabled", N2 + ', netdev="ens1np0", ' + P0 + ', priority="3"', "0x80"),
            s("roce_pfc_enabled", N1 + ', netdev="ens1np0", ' + P0 + ', priority="4"', "0x80"),
            s("roce_pfc_enabled", N2 + ', netdev="ens1np0", ' + P0 + ', priority="4"', "0x80"),
            s("roce_gid_info", N1 + ", " + P0 + ', index="3", type="RoCE v2", family="ipv4_mapped", '
              'gid="::ffff:10.0.0.1", netdev="ens1np0"', "1x80"),
            s("roce_gid_info", N2 + ", " + P0 + ', index="3", type="IB/RoCE v1", family="ipv4_mapped", '
              'gid="::ffff:10.0.0.2", netdev="ens1np0"', "1x80"),
            s("roce_gid_info", N1 + ", " + P0 + ', index="0", type="IB/RoCE v1", '
              'family="ipv6_link_local", gid="fe80::1", netdev="ens1np0"', "1x80"),
            s("roce_gid_info", N2 + ", " + P0 + ', index="0", type="IB/RoCE v1", '
              'family="ipv6_link_local", gid="fe80::2", netdev="ens1np0"', "1x80"),
        ],
        "tests": [
            ("50m", "RoceFirmwareDrift", []),
            ("70m", "RoceFirmwareDrift", [({"job": "roce_exporter", "hca_type": "MT4129"}, "2")]),
            ("70m", "RoceMtuInconsistent", [({"job": "roce_exporter"}, "2")]),
            ("70m", "RocePfcPriorityInconsistent", [({"job": "roce_exporter", "priority": "3"},
                                                     "1")]),
            ("70m", "RoceGidTypeInconsistent", [({"job": "roce_exporter", "index": "3"}, "2")]),
        ],
    },
    {
        "name": "consistent fleet",
        "series": [
            s("roce_netdev_mtu_bytes", N1 + ', netdev="ens1np0", ' + P0, "9000x80"),
            s("roce_netdev_mtu_bytes", N2 + ', netdev="ens1np0", ' + P0, "9000x80"),
            # management netdev without an RDMA port: not part of the check.
            s("roce_netdev_mtu_bytes", N2 + ', netdev="eth0", device="", port=""', "1500x80"),
            s("roce_pfc_enabled", N1 + ', netdev="ens1np0", ' + P0 + ', priority="3"', "1x80"),
            s("roce_pfc_enabled", N2 + ', netdev="ens1np0", ' + P0 + ', priority="3"', "1x80"),
            s("roce_device_info", N1 + ', device="mlx5_0", hca_type="MT4129", fw_version="28.39.1002"',
              "1x80"),
            s("roce_device_info", N2 + ', device="mlx5_0", hca_type="MT4129", fw_version="28.39.1002"',
              "1x80"),
        ],
        "tests": [
            ("70m", "RoceMtuInconsistent", []),
            ("70m", "RocePfcPriorityInconsistent", []),
            ("70m", "RoceFirmwareDrift", []),
            ("70m", "RoceGidTypeInconsistent", []),
        ],
    },
]


def rules_by_name():
    params = dict(generate.DEFAULTS, for_override=None)
    out = {}
    for _, groups in generate.groups(params):
        for g in groups:
            for r in g["rules"]:
                if "alert" in r:
                    out[r["alert"]] = r
    return out


VALUE = re.compile(r"\{\{ \$value[^}]*\}\}")
LABEL = re.compile(r"\{\{ \$labels\.(\w+) \}\}")


def render(template, labels, value):
    if VALUE.search(template) and value is None:
        raise SystemExit(f"a value text is needed for: {template}")
    text = VALUE.sub(lambda _: value, template)
    return LABEL.sub(lambda m: labels.get(m.group(1), ""), text)


def build():
    rules = rules_by_name()
    covered = set()
    tests = []
    for group in GROUPS:
        cases = []
        for eval_time, name, expected in group["tests"]:
            rule = rules[name]
            if expected:
                covered.add(name)
            exp = []
            for labels, value in expected:
                # an empty label is no label in Prometheus
                all_labels = {k: v for k, v in labels.items() if v != ""}
                all_labels.update(rule["labels"])
                ann = {k: render(v, all_labels, value) if k != "runbook_url" else v
                       for k, v in rule["annotations"].items()}
                exp.append({"exp_labels": all_labels, "exp_annotations": ann})
            cases.append({"eval_time": eval_time, "alertname": name, "exp_alerts": exp})
        tests.append({
            "name": group["name"],
            "interval": group.get("interval", "1m"),
            "input_series": group["series"],
            "alert_rule_test": cases,
        })
    missing = set(rules) - covered
    if missing:
        raise SystemExit(f"alerts without a firing test case: {sorted(missing)}")
    doc = {
        "rule_files": ["../../alerts/roce_exporter.rules.yml",
                       "../../alerts/roce_exporter.fleet.rules.yml"],
        "evaluation_interval": "1m",
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
