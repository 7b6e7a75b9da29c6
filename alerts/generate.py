#!/usr/bin/env python3
"""Generates the Prometheus rule files of roce_exporter (python3, stdlib only).

The monitoring-mixin way without jsonnet: every alert and recording rule is
written once here, with the selector of the exporter's series, the label(s)
that delimit a fleet, the thresholds and the `for:` durations as parameters.
The committed `alerts/*.rules.yml` are this script's output with the default
parameters; `tests/monitoring/run.py static` fails when they differ.

    python3 alerts/generate.py                      # rewrite alerts/*.rules.yml
    python3 alerts/generate.py --selector 'job="rdma"' --out /etc/prometheus/rules
    python3 alerts/generate.py --for-override 0s --out /tmp/x   # tests only

Metric names and labels: docs/metrics.md (generated from src/exposition/).
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

DEFAULTS = {
    # PromQL label matchers selecting the exporter's series (mixin convention).
    "selector": 'job="roce_exporter"',
    # Labels that delimit one fleet for the cross-node rules.
    "fleet_by": "job",
    "runbook_url": "https://example.invalid/roce_exporter/blob/main/docs/runbook.md",
    # Fraction of time a priority may spend paused before it is a storm.
    "pfc_pause_ratio": 0.2,
    "cnp_per_second": 10000,
    "ecn_per_second": 10000,
    "out_of_buffer_per_second": 1,
    "discards_per_second": 1,
    "retransmissions_per_second": 10,
    "sequence_errors_per_second": 10,
    # Bit error rate (symbol errors per bit at the port's rate).
    "max_ber": 1e-12,
    # Expected link rate in Gb/s; None: the fastest active port of the fleet.
    "expected_link_rate_gbps": None,
    "probe_failure_ratio": 0.05,
    # The p99 probe RTT may grow to this factor of its own day-long average.
    "probe_latency_factor": 2,
    # RTTs below this never count as a regression (seconds).
    "probe_latency_floor": 0.0001,
    # Sample older than this many intervals (and at least 30 s) is stale.
    "stale_intervals": 3,
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=HERE, help="directory for the rule files")
    p.add_argument("--selector", default=DEFAULTS["selector"])
    p.add_argument("--fleet-by", default=DEFAULTS["fleet_by"],
                   help="comma separated labels that delimit a fleet")
    p.add_argument("--runbook-url", default=DEFAULTS["runbook_url"])
    p.add_argument("--expected-link-rate-gbps", type=float, default=None)
    p.add_argument("--for-override", default=None,
                   help="use this `for:` in every alert (tests only)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=NUMBER",
                   help="override a numeric threshold, e.g. pfc_pause_ratio=0.5")
    return p.parse_args(argv)


def params_from(args):
    params = dict(DEFAULTS)
    params["selector"] = args.selector
    params["fleet_by"] = args.fleet_by
    params["runbook_url"] = args.runbook_url
    params["expected_link_rate_gbps"] = args.expected_link_rate_gbps
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in DEFAULTS or key in ("selector", "fleet_by", "runbook_url"):
            sys.exit(f"--set: unknown threshold {key!r}")
        try:
            params[key] = float(value)
        except ValueError:
            sys.exit(f"--set {key}: not a number: {value!r}")
    params["for_override"] = args.for_override
    return params


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
M_SYS = 'path="SYS"'
M_CRITICAL = 'severity="critical"'
M_FW = 'fw_version!=""'
M_DEV = 'device!=""'

# Subject of a per-port alert, as it appears in summaries.
PORT = "{{ $labels.device }} port {{ $labels.port }}"
NETDEV = "{{ $labels.netdev }} ({{ $labels.device }} port {{ $labels.port }})"
ON = "on {{ $labels.instance }}"


def alert(params, name, expr, for_, severity, summary, description):
    if params["for_override"] is not None:
        for_ = params["for_override"]
    rule = {"alert": name, "expr": expr}
    if for_ and for_ != "0s":
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": params["runbook_url"] + "#" + name.lower(),
    }
    return rule


def recording_rules(p):
    s = lambda extra="": sel(p, extra)  # noqa: E731
    return [
        {
            # Seconds paused per second: the fraction of time a priority
            # could not send (tx: we paused the peer; rx: the peer paused us).
            "record": "netdev_priority:roce_pfc_pause_duration_seconds:rate1m",
            "expr": f"rate(roce_pfc_pause_duration_seconds_total{s()}[1m])",
        },
        {
            # Symbol errors per bit carried at the port's signalling rate.
            "record": "device_port:roce_port_symbol_errors:ber5m",
            "expr": (
                f"rate(roce_port_symbol_errors_total{s()}[5m])\n"
                f"  / (8 * roce_port_rate_bytes_per_second{s()} > 0)"
            ),
        },
        {
            "record": "device_port:roce_probe_rtt_seconds:p99_rate10m",
            "expr": (
                "histogram_quantile(0.99,\n"
                f"  sum without (gid_index) (rate(roce_probe_rtt_seconds_bucket{s()}[10m])))"
            ),
        },
    ]


def node_alerts(p):
    s = lambda extra="": sel(p, extra)  # noqa: E731
    rules = [
        alert(p, "RoceExporterDown", f"up{s()} == 0", "5m", "critical",
              "roce_exporter {{ $labels.instance }} is down",
              "Prometheus could not scrape roce_exporter on {{ $labels.instance }} "
              "for 5 minutes: no RDMA fabric data from this node."),
        alert(p, "RoceCollectorFailing", f"roce_collector_success{s()} == 0", "10m", "warning",
              "roce_exporter collector {{ $labels.collector }} failing " + ON,
              "The {{ $labels.collector }} collector of roce_exporter on {{ $labels.instance }} "
              "has failed every sample for 10 minutes; its families are missing. "
              "The exporter log says why (logged once per state change)."),
        alert(p, "RoceSampleStale",
              f"time() - roce_sample_timestamp_seconds{s()}\n"
              f"  > clamp_min({num(p['stale_intervals'])} * roce_sample_interval_seconds{s()}, 30)",
              "5m", "warning",
              "roce_exporter serves a stale sample " + ON,
              "The sample served by {{ $labels.instance }} is {{ $value | humanizeDuration }} old, "
              "more than " + num(p["stale_intervals"]) + " sample intervals: the sampler is stuck "
              "(a hung sysfs read or netlink request)."),
        alert(p, "RocePfcStorm",
              f"netdev_priority:roce_pfc_pause_duration_seconds:rate1m{s()} > {num(p['pfc_pause_ratio'])}",
              "2m", "critical",
              "PFC storm on " + NETDEV + " priority {{ $labels.priority }} " + ON,
              "Priority {{ $labels.priority }} of {{ $labels.netdev }} ({{ $labels.device }} port "
              "{{ $labels.port }}) on {{ $labels.instance }} spent {{ $value | humanizePercentage }} "
              "of the last minute paused in direction {{ $labels.direction }} (tx: this NIC pauses "
              "its peer; rx: the peer pauses this NIC). Above " + num(p["pfc_pause_ratio"] * 100)
              + "% the lossless class stalls and pauses spread through the fabric."),
        alert(p, "RocePauseStormDetected",
              # the counter's own severity label (warning/error/continuous)
              # would be replaced by the alert's: keep it as storm_severity.
              f'label_replace(increase(roce_pause_storm_events_total{s()}[5m]) > 0,\n'
              f'  "storm_severity", "$1", "severity", "(.*)")', "0s", "critical",
              "NIC pause storm detector fired on " + NETDEV + " " + ON,
              "The pause storm detector of {{ $labels.netdev }} ({{ $labels.device }} port "
              "{{ $labels.port }}) on {{ $labels.instance }} counted {{ $value | humanize }} "
              "{{ $labels.storm_severity }} events in 5 minutes: the NIC kept sending pause frames "
              "because its receive side was stuck."),
        alert(p, "RoceCnpSpike",
              f"rate(roce_cnp_sent_total{s()}[5m]) > {num(p['cnp_per_second'])}\n"
              f"or rate(roce_cnp_handled_total{s()}[5m]) > {num(p['cnp_per_second'])}",
              "10m", "warning",
              "CNP spike on " + PORT + " " + ON,
              "{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }} sends or "
              "handles {{ $value | humanize }} congestion notification packets per second "
              "(threshold " + num(p["cnp_per_second"]) + "): DCQCN is throttling flows hard."),
        alert(p, "RoceEcnMarkSpike",
              f"rate(roce_ecn_marked_packets_total{s()}[5m]) > {num(p['ecn_per_second'])}",
              "10m", "warning",
              "ECN-marked RoCE traffic spike on " + PORT + " " + ON,
              "{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }} receives "
              "{{ $value | humanize }} ECN-marked RoCE packets per second (threshold "
              + num(p["ecn_per_second"]) + "): switch queues on the path are building up."),
        alert(p, "RoceOutOfBufferDrops",
              f"rate(roce_out_of_buffer_drops_total{s()}[5m]) > {num(p['out_of_buffer_per_second'])}",
              "5m", "warning",
              "RDMA out_of_buffer drops on " + PORT + " " + ON,
              "{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }} drops "
              "{{ $value | humanize }} packets per second for lack of receive WQEs or buffers "
              "(threshold " + num(p["out_of_buffer_per_second"]) + "/s)."),
        alert(p, "RoceNetdevDiscards",
              f"sum without (priority) (rate(roce_netdev_discards_total{s()}[5m]))\n"
              f"  > {num(p['discards_per_second'])}",
              "5m", "warning",
              "NIC discards ({{ $labels.reason }}) on " + NETDEV + " " + ON,
              "{{ $labels.netdev }} ({{ $labels.device }} port {{ $labels.port }}) on "
              "{{ $labels.instance }} discards {{ $value | humanize }} packets per second "
              "with reason {{ $labels.reason }} (threshold "
              + num(p["discards_per_second"]) + "/s). A lossless RoCE class should not drop."),
        alert(p, "RoceRetransmissions",
              f"rate(roce_retransmissions_total{s()}[5m]) > {num(p['retransmissions_per_second'])}\n"
              f"or rate(roce_local_ack_timeout_errors_total{s()}[5m]) > "
              f"{num(p['retransmissions_per_second'])}",
              "10m", "warning",
              "RoCE retransmissions on " + PORT + " " + ON,
              "{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }} retransmits "
              "or hits ACK timeouts {{ $value | humanize }} times per second (threshold "
              + num(p["retransmissions_per_second"]) + "/s): packets are lost on the path."),
        alert(p, "RoceSequenceErrors",
              f"rate(roce_out_of_sequence_packets_total{s()}[5m]) > "
              f"{num(p['sequence_errors_per_second'])}\n"
              f"or rate(roce_packet_sequence_errors_total{s()}[5m]) > "
              f"{num(p['sequence_errors_per_second'])}",
              "10m", "warning",
              "RoCE sequence errors on " + PORT + " " + ON,
              "{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }} sees "
              "{{ $value | humanize }} out-of-sequence packets or sequence-error NAKs per second "
              "(threshold " + num(p["sequence_errors_per_second"]) + "/s): packets are dropped "
              "between the peers."),
        alert(p, "RoceSymbolErrors",
              f"device_port:roce_port_symbol_errors:ber5m{s()} > {num(p['max_ber'])}",
              "10m", "warning",
              "Bit error rate above " + num(p["max_ber"]) + " on " + PORT + " " + ON,
              "{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }} has a "
              "symbol error rate of {{ $value | printf \"%.1e\" }} per bit over 5 minutes (limit "
              + num(p["max_ber"]) + "): a cable, transceiver or port is degrading."),
        alert(p, "RoceLinkFlap",
              f"increase(roce_port_link_downed_total{s()}[10m]) > 0", "0s", "warning",
              "Link flap on " + PORT + " " + ON,
              "{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }} went down "
              "and recovered {{ $value | humanize }} times in 10 minutes (link_downed)."),
        alert(p, "RocePortDown",
              f"roce_port_up{s()} == 0", "5m", "critical",
              "RDMA port " + PORT + " is down " + ON,
              "{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }} has not "
              "been ACTIVE and LinkUp for 5 minutes."),
    ]
    active = f"roce_port_up{s()} == 1"
    rate = f"roce_port_rate_bytes_per_second{s()}"
    if p["expected_link_rate_gbps"] is not None:
        expected = p["expected_link_rate_gbps"] * 1e9 / 8
        expr = f"({rate} and {active}) < {num(expected)}"
        what = num(p["expected_link_rate_gbps"]) + " Gb/s"
    else:
        by = p["fleet_by"]
        expr = (f"({rate} and {active})\n"
                f"  < on ({by}) group_left ()\n"
                f"  max by ({by}) ({rate} and {active})")
        what = "the fastest active port of the fleet"
    rules += [
        alert(p, "RoceLinkRateBelowExpected", expr, "15m", "warning",
              "RDMA port " + PORT + " runs below the expected rate " + ON,
              "{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }} is active "
              "at {{ $value | humanize }}B/s, below " + what + ": it negotiated a lower speed "
              "or fewer lanes."),
        alert(p, "RocePcieDowntrained",
              f"roce_pcie_link_downtrained{s()} == 1", "15m", "warning",
              "PCIe link above {{ $labels.pci_address }} is downtrained " + ON,
              "The PCIe link above {{ $labels.pci_address }} (device {{ $labels.device }}, "
              "upstream {{ $labels.upstream }}) on {{ $labels.instance }} runs below the "
              "{{ $labels.aspect }} both ends support."),
        alert(p, "RoceGpuNicPathSys",
              f'roce_gpu_nearest_nic_info{sel(p, M_SYS)} == 1', "15m", "warning",
              "GPU {{ $labels.gpu }} has no RDMA NIC on its NUMA node " + ON,
              "The nearest RDMA device of GPU {{ $labels.gpu }} on {{ $labels.instance }} is "
              "{{ $labels.device }}, through the inter-socket link (SYS): GPUDirect RDMA traffic "
              "crosses the CPU interconnect."),
        alert(p, "RoceGpuDirectNotReady",
              f"roce_gpudirect_rdma_available{s()} == 0", "15m", "warning",
              "GPUDirect RDMA is not ready " + ON,
              "Neither nvidia_peermem nor the dma-buf path is ready on {{ $labels.instance }}: "
              "GPU buffers are staged through host memory."),
        alert(p, "RoceProbeFailing",
              f"sum without (reason, gid_index, op) (rate(roce_probe_failures_total{s()}[10m]))\n"
              f"  / sum without (gid_index, op) (rate(roce_probe_requests_total{s()}[10m]))\n"
              f"  > {num(p['probe_failure_ratio'])}",
              "10m", "warning",
              "RDMA probes fail on " + PORT + " " + ON,
              "{{ $value | humanizePercentage }} of the loopback probes of {{ $labels.device }} "
              "port {{ $labels.port }} on {{ $labels.instance }} failed over 10 minutes "
              "(roce_probe_failures_total by reason says why)."),
        alert(p, "RoceProbeLatencyRegression",
              f"device_port:roce_probe_rtt_seconds:p99_rate10m{s()}\n"
              f"  > {num(p['probe_latency_factor'])} * avg_over_time("
              f"device_port:roce_probe_rtt_seconds:p99_rate10m{s()}[1d] offset 1h)\n"
              f"and device_port:roce_probe_rtt_seconds:p99_rate10m{s()} > "
              f"{num(p['probe_latency_floor'])}",
              "15m", "warning",
              "RDMA probe latency regression on " + PORT + " " + ON,
              "The p99 {{ $labels.op }} probe RTT of {{ $labels.device }} port {{ $labels.port }} "
              "on {{ $labels.instance }} is {{ $value | humanizeDuration }}, more than "
              + num(p["probe_latency_factor"]) + " times its average over the previous day."),
        alert(p, "RoceCriticalFinding",
              f'roce_finding{sel(p, M_CRITICAL)} == 1', "5m", "critical",
              "roce_exporter finding {{ $labels.rule }} " + ON,
              "roce_exporter on {{ $labels.instance }} reports the critical finding "
              "{{ $labels.rule }} (device {{ $labels.device }}, port {{ $labels.port }}, netdev "
              "{{ $labels.netdev }}, gpu {{ $labels.gpu }}). Evidence, fix and verify command: "
              "http://{{ $labels.instance }}/findings or `roce_exporter check`."),
    ]
    return rules


def fleet_alerts(p):
    s = lambda extra="": sel(p, extra)  # noqa: E731
    by = p["fleet_by"]
    fleet = "{{ $labels." + by.split(",")[0].strip() + " }}"
    return [
        alert(p, "RoceFirmwareDrift",
              f"count by ({by}, hca_type) (\n"
              f"  count by ({by}, hca_type, fw_version) "
              f"(roce_device_info{sel(p, M_FW)})\n) > 1",
              "1h", "warning",
              "RDMA firmware drift in " + fleet + " ({{ $labels.hca_type }})",
              "{{ $value }} different firmware versions run on RDMA devices of type "
              "{{ $labels.hca_type }} in " + fleet + "."),
        alert(p, "RoceMtuInconsistent",
              f"count by ({by}) (\n"
              f"  count_values by ({by}) (\"mtu\", roce_netdev_mtu_bytes{s(M_DEV)})\n"
              ") > 1",
              "30m", "warning",
              "RoCE netdev MTUs differ in " + fleet,
              "The netdevs behind RDMA ports in " + fleet + " use {{ $value }} different MTUs: "
              "RoCE traffic between them runs at the smallest one or is dropped."),
        alert(p, "RocePfcPriorityInconsistent",
              f"count by ({by}, priority) (roce_pfc_enabled{s(M_DEV)} == 1)\n"
              f"  < on ({by}, priority)\n"
              f"  count by ({by}, priority) (roce_pfc_enabled{s(M_DEV)})",
              "30m", "warning",
              "PFC on priority {{ $labels.priority }} is not consistent in " + fleet,
              "PFC is enabled on priority {{ $labels.priority }} for only {{ $value }} of the RoCE "
              "netdevs in " + fleet + ": lossless traffic on it is dropped at the others."),
        alert(p, "RoceGidTypeInconsistent",
              f"count by ({by}, index) (\n"
              f"  count by ({by}, index, type, family) (roce_gid_info{s()})\n"
              ") > 1",
              "30m", "warning",
              "GID index {{ $labels.index }} has several types in " + fleet,
              "GID index {{ $labels.index }} holds {{ $value }} different type/address family "
              "combinations across the RDMA ports of " + fleet + ": a fleet-wide GID index "
              "(NCCL_IB_GID_INDEX) selects RoCE v1 or a link-local GID on some nodes."),
    ]


def groups(p):
    fleet = fleet_alerts(p)
    return [
        ("roce_exporter.rules.yml", [
            {"name": "roce_exporter.recording", "rules": recording_rules(p)},
            {"name": "roce_exporter.node", "rules": node_alerts(p)},
        ]),
        ("roce_exporter.fleet.rules.yml", [
            {"name": "roce_exporter.fleet", "interval": "1m", "rules": fleet},
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


HEADER = ("# Generated by alerts/generate.py: edit the generator, not this file.\n"
          "# Runbook: docs/runbook.md. Metrics: docs/metrics.md.\n")


def render(params):
    """{file name: text} for the given parameters."""
    return {name: HEADER + yaml_dump({"groups": gs}) + "\n" for name, gs in groups(params)}


def alert_names(params=None):
    params = params or dict(DEFAULTS, for_override=None)
    return [r["alert"] for _, gs in groups(params) for g in gs for r in g["rules"] if "alert" in r]


def main(argv):
    args = parse_args(argv)
    params = params_from(args)
    os.makedirs(args.out, exist_ok=True)
    for name, text in render(params).items():
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
