#!/usr/bin/env python3
"""Generates the Grafana dashboards of roce_exporter (python3, stdlib only).

The monitoring-mixin way without jsonnet: every panel is written once here,
with the selector of the exporter's series as a parameter. The committed
`dashboards/*.json` are this script's output with the default parameters
(importable as they are: the data source is a variable, `instance` and
`device` are template variables, every panel has a unit);
`tests/monitoring/run.py static` fails when they differ.

    python3 dashboards/generate.py                   # rewrite dashboards/*.json
    python3 dashboards/generate.py --selector 'job="rdma"' --out /var/lib/grafana/dashboards

Metric names and labels: docs/metrics.md (generated from crates/exposition/src/).
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RULES_JSON = os.path.join(os.path.dirname(HERE), "docs", "rules.json")

DEFAULTS = {
    "selector": 'job="roce_exporter"',
    "tags": ["roce_exporter", "rdma"],
    "refresh": "30s",
    # Prometheus' scrape interval (seconds): rate()/increase() ranges are 4x
    # it, so a window always holds at least three samples.
    "scrape_interval": 60,
    # Matchers of the series of the exporters beside this one that some
    # panels show next to ours (joined through the recording rules of
    # alerts/generate.py's group roce_exporter.joins): none by default, as
    # their metric names are their own.
    "node_exporter_selector": "",
    "dcgm_selector": "",
}

DS = {"type": "prometheus", "uid": "${datasource}"}


class Ctx:
    """Selectors of one generation run."""

    def __init__(self, selector, params=None):
        params = params or DEFAULTS
        self.base = selector
        # node_exporter's and dcgm-exporter's series.
        self.ne = params.get("node_exporter_selector", "")
        self.dcgm = params.get("dcgm_selector", "")
        # Node level series (no device label).
        self.n = f'{selector}, instance=~"$instance"'
        # Series with a device label.
        self.d = f'{self.n}, device=~"$device"'


def target(expr, legend="", ref="A", fmt=None, instant=False):
    t = {"datasource": DS, "refId": ref, "expr": expr, "legendFormat": legend or "__auto"}
    if fmt:
        t["format"] = fmt
    if instant:
        t["instant"] = True
        t["range"] = False
    else:
        t["range"] = True
    return t


def panel(kind, title, description, unit, targets, w=12, h=8, **extra):
    p = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [dict(t, refId=chr(ord("A") + i)) for i, t in enumerate(targets)],
        "_w": w,
        "_h": h,
    }
    p.update(extra)
    return p


def ts(title, description, unit, targets, w=12, h=8, stack=False):
    custom = {"drawStyle": "line", "fillOpacity": 10, "lineWidth": 1, "showPoints": "never"}
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    p = panel("timeseries", title, description, unit, targets, w, h,
              options={"legend": {"displayMode": "table", "placement": "bottom",
                                  "calcs": ["max", "lastNotNull"]},
                       "tooltip": {"mode": "multi", "sort": "desc"}})
    p["fieldConfig"]["defaults"]["custom"] = custom
    return p


def stat(title, description, unit, expr, w=4, h=4, thresholds=None):
    p = panel("stat", title, description, unit, [target(expr, instant=True)], w, h,
              options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                       "colorMode": "background", "graphMode": "none", "textMode": "value"})
    steps = [{"color": "green", "value": None}]
    for value, color in thresholds or []:
        steps.append({"color": color, "value": value})
    p["fieldConfig"]["defaults"]["thresholds"] = {"mode": "absolute", "steps": steps}
    return p


def table(title, description, unit, expr, hide=(), w=24, h=8, rename=None, order=()):
    """An instant query as a table; `order`: the columns named first, in
    that order (the others follow as Grafana orders them)."""
    excluded = {"Time": True, "__name__": True, "job": True}
    excluded.update({k: True for k in hide})
    options = {"excludeByName": excluded, "renameByName": rename or {}}
    if order:
        options["indexByName"] = {k: i for i, k in enumerate(order)}
    return panel("table", title, description, unit,
                 [target(expr, fmt="table", instant=True)], w, h,
                 options={"showHeader": True, "cellHeight": "sm"},
                 transformations=[{"id": "organize", "options": options}])


def layout(panels):
    """Grid positions left to right, top to bottom, and panel ids."""
    x = y = row_h = 0
    for i, p in enumerate(panels, start=1):
        w, h = p.pop("_w"), p.pop("_h")
        if x + w > 24:
            x, y, row_h = 0, y + row_h, 0
        p["id"] = i
        p["gridPos"] = {"x": x, "y": y, "w": w, "h": h}
        x += w
        row_h = max(row_h, h)
    return panels


def variables(c, one_instance=True):
    """Data source, instance and device. The per-node dashboards start on
    one instance (Grafana selects the first; at 1,000 nodes `All` would
    pull every node into every panel); several can be picked."""
    def query_var(name, label, query):
        return {
            "name": name, "label": label, "type": "query", "datasource": DS,
            "definition": query,
            "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "refresh": 2, "sort": 1, "multi": True, "includeAll": True, "allValue": ".+",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [], "hide": 0, "regex": "",
        }

    instance = query_var("instance", "Instance",
                         f"label_values(roce_exporter_build_info{{{c.base}}}, instance)")
    if one_instance:
        instance.update(includeAll=False, current={})
        del instance["allValue"]

    return [
        {"name": "datasource", "label": "Data source", "type": "datasource",
         "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": "",
         "options": []},
        instance,
        query_var("device", "RDMA device",
                  f"label_values(roce_port_info{{{c.n}}}, device)"),
    ]


def dashboard(c, uid, title, description, panels, params, templating=None):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": params["tags"],
        "editable": True,
        "graphTooltip": 1,
        "timezone": "",
        "refresh": params["refresh"],
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "annotations": {"list": []},
        "links": [{"title": "roce_exporter dashboards", "type": "dashboards",
                   "tags": params["tags"][:1], "asDropdown": True, "includeVars": True,
                   "keepTime": True}],
        "templating": {"list": templating or variables(c)},
        "panels": layout(panels),
    }


# The range of every rate()/increase(), set by render() from the scrape
# interval (Grafana's $__rate_interval assumes the data source's scrape
# interval setting, 15 s unless configured, and is one sample wide at 60 s).
RI = "4m"


def rate_range(scrape_interval):
    seconds = 4 * int(scrape_interval)
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def overview(c, params):
    d = c.d
    panels = [
        stat("Ports up", "RDMA ports that are ACTIVE and LinkUp.", "none",
             f"count(roce_port_up{{{d}}} == 1) or vector(0)"),
        stat("Ports not up", "RDMA ports that are not ACTIVE and LinkUp.", "none",
             f"count(roce_port_up{{{d}}} == 0) or vector(0)", thresholds=[(1, "red")]),
        stat("Critical findings", "Active critical findings of the exporter's rules.", "none",
             f'sum(roce_findings_active{{{c.n}, severity="critical"}})', thresholds=[(1, "red")]),
        stat("Warning findings", "Active warning findings of the exporter's rules.", "none",
             f'sum(roce_findings_active{{{c.n}, severity="warning"}})',
             thresholds=[(1, "orange")]),
        stat("Failing collectors", "Collectors whose last sample failed.", "none",
             f"count(roce_collector_success{{{c.n}}} == 0) or vector(0)",
             thresholds=[(1, "red")]),
        stat("Oldest sample", "Age of the oldest sample served by the selected exporters.", "s",
             f"max(time() - roce_sample_timestamp_seconds{{{c.n}}})",
             thresholds=[(30, "orange"), (120, "red")]),
        table("Active findings", "Findings of the exporter's rules (details at /findings on "
              "each exporter, or `roce_exporter check`).", "none",
              f"roce_finding{{{c.n}}}", hide=["Value"]),
        table("Ports", "RDMA ports: link layer, netdev, state (1 up) and rate.", "none",
              f"roce_port_info{{{d}}} * on (instance, device, port) group_left () "
              f"roce_port_up{{{d}}}",
              rename={"Value": "up"}, h=8),
        ts("Port rate", "Data rate of each port as the kernel reports it.", "Bps",
           [target(f"roce_port_rate_bytes_per_second{{{d}}}", "{{instance}} {{device}}/{{port}}")]),
        ts("Netdev speed", "Link speed of the netdevs behind RDMA ports.", "Bps",
           [target(f"roce_netdev_speed_bytes_per_second{{{d}}}", "{{instance}} {{netdev}}")]),
        ts("Receive throughput", "RDMA port data received (counters/port_rcv_data × 4).", "Bps",
           [target(f"rate(roce_port_data_received_bytes_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}}")]),
        ts("Transmit throughput", "RDMA port data transmitted (counters/port_xmit_data × 4).",
           "Bps",
           [target(f"rate(roce_port_data_transmitted_bytes_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}}")]),
        ts("Packets", "RDMA port packets received and transmitted.", "pps",
           [target(f"rate(roce_port_packets_received_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}} rx"),
            target(f"rate(roce_port_packets_transmitted_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}} tx")]),
        ts("Findings by severity", "Active findings over time.", "none",
           [target(f"sum by (severity) (roce_findings_active{{{c.n}}})", "{{severity}}")],
           stack=True),
        table("Collectors", "State of each collector in the last sample.", "none",
              f"roce_collector_state_info{{{c.n}}} == 1", hide=["Value"], w=12),
        ts("Collector duration", "Time each collector took in the last sample.", "s",
           [target(f"roce_collector_duration_seconds{{{c.n}}}",
                   "{{instance}} {{collector}}")]),
        table("Netdevs", "Netdevs behind RDMA ports: driver and operational state "
              "(operstate: up, down, lowerlayerdown, ...).", "none",
              f"roce_netdev_info{{{d}}}", hide=["Value"], w=12),
        ts("Missed sample ticks", "Sample ticks skipped because a sample or the sampler's "
           "scheduling overran sample_interval.", "short",
           [target(f"increase(roce_sample_ticks_missed_total{{{c.n}}}[{RI}])", "{{instance}}")]),
        table("Devices", "RDMA devices: driver, firmware, board, PCI address, NUMA node.",
              "none", f"roce_device_info{{{d}}}", hide=["Value"]),
    ]
    return dashboard(c, "roce-overview", "RoCE / Fabric overview",
                     "Ports, rates, throughput and findings of roce_exporter.", panels, params)


def congestion(c, params):
    d = c.d
    panels = [
        ts("PFC pause time ratio", "Fraction of time a priority was paused by PFC (tx: this "
           "NIC paused its peer; rx: the peer paused this NIC). Above 0.2 is a storm "
           "(RocePfcStorm).", "percentunit",
           [target(f"rate(roce_pfc_pause_duration_seconds_total{{{d}}}[{RI}])",
                   "{{instance}} {{netdev}} prio {{priority}} {{direction}}")]),
        ts("PFC pause frames", "PFC pause frames (XOFF and XON) per priority and direction.",
           "pps",
           [target(f"rate(roce_pfc_pause_frames_total{{{d}}}[{RI}])",
                   "{{instance}} {{netdev}} prio {{priority}} {{direction}}")]),
        ts("PFC pause transitions", "Transitions between paused and not paused per priority.",
           "cps",
           [target(f"rate(roce_pfc_pause_transitions_total{{{d}}}[{RI}])",
                   "{{instance}} {{netdev}} prio {{priority}} {{direction}}")]),
        ts("Pause storm detections", "NIC pause storm detector events (mlx5 warning/error, "
           "bnxt_en continuous).", "short",
           [target(f"increase(roce_pause_storm_events_total{{{d}}}[{RI}])",
                   "{{instance}} {{netdev}} {{severity}}")]),
        ts("Global pause frames", "IEEE 802.3x link-level pause frames.", "pps",
           [target(f"rate(roce_link_pause_frames_total{{{d}}}[{RI}])",
                   "{{instance}} {{netdev}} {{direction}}")]),
        ts("CNPs", "Congestion notification packets sent (notification point) and handled "
           "or ignored (reaction point).", "pps",
           [target(f"rate(roce_cnp_sent_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}} sent"),
            target(f"rate(roce_cnp_handled_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}} handled"),
            target(f"rate(roce_cnp_ignored_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}} ignored")]),
        ts("ECN-marked RoCE packets", "RoCE packets received with the CE mark.", "pps",
           [target(f"rate(roce_ecn_marked_packets_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}}")]),
        ts("Packets the NIC marked, per priority", "Received packets the NIC itself "
           "ECN-marked because its per-host receive buffers were congested (mlx5 "
           "rx_prioN_marked); switch CE marks are the ECN-marked RoCE packets panel.", "pps",
           [target(f"sum by (instance, netdev, priority) "
                   f"(rate(roce_netdev_nic_ecn_marked_packets_total{{{d}}}[{RI}]))",
                   "{{instance}} {{netdev}} prio {{priority}}")]),
        ts("NIC discards by reason", "Packets the NIC dropped, port-wide counters, by "
           "reason (rx_out_of_buffer: the host's receive rings, not the fabric).", "pps",
           [target(f"sum by (instance, netdev, reason) "
                   f"(rate(roce_netdev_discards_total{{{d}}}[{RI}]))",
                   "{{instance}} {{netdev}} {{reason}}")]),
        ts("NIC discards per priority", "Packets the NIC dropped on one priority, by "
           "reason: any on a PFC (lossless) priority is loss of RoCE traffic; lossy "
           "priorities carry TCP and storage, which tolerate some.", "pps",
           [target(f"sum by (instance, netdev, priority, reason) "
                   f"(rate(roce_netdev_priority_discards_total{{{d}}}[{RI}]))",
                   "{{instance}} {{netdev}} prio {{priority}} {{reason}}")]),
        ts("Kernel drops and errors (node_exporter)", "The same netdevs as node_exporter "
           "reports them from the kernel's /proc/net/dev (node_network_*), beside the NIC's "
           "own discards: packets the kernel or driver dropped, and errors. Joined to the RDMA "
           "port through node_exporter_device:roce_netdev_port:info (docs/deploy.md); empty "
           "without node_exporter.", "pps",
           [target(f"rate(node_network_{metric}_total{{{c.ne}}}[{RI}])\n"
                   f"  * on (cluster, instance, device) group_left (roce_instance, rdma_device, port)\n"
                   f"  node_exporter_device:roce_netdev_port:info{{{c.base}, "
                   f"roce_instance=~\"$instance\", rdma_device=~\"$device\"}}",
                   "{{roce_instance}} {{device}} " + legend)
            for metric, legend in (("receive_drop", "rx drop"), ("receive_errs", "rx errors"),
                                   ("transmit_drop", "tx drop"),
                                   ("transmit_errs", "tx errors"))]),
        ts("RDMA out_of_buffer drops", "Packets dropped for lack of receive WQEs or buffers.",
           "pps",
           [target(f"rate(roce_out_of_buffer_drops_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}}")]),
        table("QoS configuration", "Per netdev: trust, the priorities with PFC on, ETS "
              "(traffic class, selection and bandwidth per class), receive buffers, DCBX mode.",
              "none", f"roce_qos_info{{{d}}}", hide=["Value"], w=12),
        table("ECN enabled priorities", "Priorities with RoCE ECN (DCQCN) on, per role: np "
              "(marks CNPs back), rp (slows down on CNPs) (mlx5).", "none",
              f"roce_ecn_info{{{d}}}", hide=["Value"], w=12),
        table("QoS trust and MTU", "Packet field the port classifies priority by, and the "
              "netdev MTU.", "bytes",
              f"roce_netdev_mtu_bytes{{{d}}} * on (instance, netdev) group_left (trust) "
              f"roce_qos_info{{{d}}}", rename={"Value": "mtu"}),
    ]
    return dashboard(c, "roce-congestion", "RoCE / Congestion",
                     "PFC per priority, pause time, CNP/ECN and discards.", panels, params)


def errors(c, params):
    d = c.d

    def port_rate(title, description, metric, unit="cps"):
        return ts(title, description, unit,
                  [target(f"rate({metric}{{{d}}}[{RI}])", "{{instance}} {{device}}/{{port}}")])

    panels = [
        ts("Bit error rate", "Symbol errors per bit at the port's rate. Above 1e-12 is "
           "RoceSymbolErrors.", "sci",
           [target(f"rate(roce_port_symbol_errors_total{{{d}}}[{RI}])\n"
                   f"  / (8 * roce_port_rate_bytes_per_second{{{d}}} > 0)",
                   "{{instance}} {{device}}/{{port}}")]),
        port_rate("Symbol errors", "Minor link errors on the physical lanes.",
                  "roce_port_symbol_errors_total"),
        ts("Link flaps", "Times the link went down (link_downed) and recovered from errors.",
           "short",
           [target(f"increase(roce_port_link_downed_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}} down"),
            target(f"increase(roce_port_link_error_recovery_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}} recovery")]),
        ts("Retransmissions and ACK timeouts", "Requester ACK timer expirations (each one "
           "retransmits) and retransmissions where the driver counts them (rxe, efa).", "cps",
           [target(f"rate(roce_local_ack_timeout_errors_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}} ACK timeouts"),
            target(f"rate(roce_retransmissions_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}} retransmissions")]),
        port_rate("RNR NAKs", "Receiver-not-ready NAKs received: the remote side had no "
                  "receive WQE posted.", "roce_rnr_naks_received_total"),
        port_rate("Out-of-sequence packets", "Packets the responder received beyond the "
                  "expected PSN.", "roce_out_of_sequence_packets_total"),
        port_rate("Sequence error NAKs", "NAKs with a PSN sequence error received.",
                  "roce_packet_sequence_errors_total"),
        port_rate("Duplicate requests", "Requests the responder had already executed.",
                  "roce_duplicate_requests_total"),
        port_rate("Retry exceeded", "Work requests failed after the transport retry count.",
                  "roce_transport_retries_exceeded_errors_total"),
        port_rate("Receive errors", "Received packets with errors.",
                  "roce_port_receive_errors_total"),
        port_rate("Transmit discards", "Outbound packets discarded (port down or congested).",
                  "roce_port_transmit_discards_total"),
        port_rate("ICRC errors", "RoCE packets received with an invalid ICRC.",
                  "roce_icrc_errors_total"),
        ts("Pre-FEC bit error rate", "FEC corrected bits per bit at the netdev's speed "
           "(ethtool netlink FEC_GET); fec_ber_high divides by the FEC code's line rate "
           "(425 Gb/s for 400G RS(544,514)) and judges each code against its own limit "
           "(RS(544,514) 1e-5, RS(528,514) 2e-6, BASE-R 1e-8).", "sci",
           [target(f"rate(roce_fec_corrected_bits_total{{{d}, lane=\"\"}}[{RI}])\n"
                   f"  / ignoring(lane) (8 * roce_netdev_speed_bytes_per_second{{{d}}} > 0)",
                   "{{instance}} {{netdev}}")]),
        ts("FEC uncorrectable blocks", "Codewords FEC could not correct: frames lost on the "
           "link (fec_uncorrectable).", "short",
           [target(f"increase(roce_fec_uncorrectable_blocks_total{{{d}, lane=\"\"}}[{RI}])",
                   "{{instance}} {{netdev}}")]),
        ts("FEC corrected bits per lane", "Bits FEC corrected on each lane since the link "
           "came up (mlx5 rx_err_lane_N_phy, or FEC_GET's lanes; the lanes metric group). "
           "Lanes of a healthy link count alike; one lane with nearly all of them is the "
           "fec_lane_skew finding, judged whether or not the group is on.", "short",
           [target(f"roce_phy_errors_total{{{d}, kind=\"fec_corrected_bits\", lane!=\"\"}}",
                   "{{instance}} {{netdev}} lane {{lane}}"),
            target(f"roce_fec_corrected_bits_total{{{d}, lane!=\"\"}}",
                   "{{instance}} {{netdev}} lane {{lane}} (FEC_GET)", ref="B")]),
        ts("Bits past FEC since link-up", "Error bits FEC did not correct, counted since the "
           "link came up (mlx5 rx_pcs_symbol_err_phy: the firmware clears it at link-up). "
           "From 100 on, the post_fec_errors finding; growth is fec_uncorrectable.", "short",
           [target(f"roce_phy_errors_total{{{d}, kind=\"pcs_symbol_errors\"}}",
                   "{{instance}} {{netdev}}")]),
        ts("Module Rx power per lane", "Optical power each lane of the module receives, in "
           "dBm; compare with the module's own low warning threshold "
           "(module_rx_power_low) and with the other lanes (module_lane_imbalance).", "dBm",
           [target(f"10 * log10(roce_module_rx_power_watts{{{d}}} * 1000 > 0)",
                   "{{instance}} {{netdev}} lane {{lane}}"),
            target(f"10 * log10(roce_module_threshold{{{d}, monitor=\"rx_power_watts\", "
                   f"level=\"low_warning\"}} * 1000 > 0)",
                   "{{instance}} {{netdev}} low warning", ref="B")]),
        ts("Module temperature", "Case temperature of each module (module_temperature_high "
           "against the module's own high warning threshold).", "celsius",
           [target(f"roce_module_temperature_celsius{{{d}}}", "{{instance}} {{netdev}}")]),
        ts("Carrier down transitions", "Times the netdev's link went down "
           "(carrier_down_count, what link_flap counts).", "short",
           [target(f"increase(roce_netdev_carrier_transitions_total{{{d}, direction=\"down\"}}[{RI}])",
                   "{{instance}} {{netdev}}")]),
        ts("PCIe AER errors", "AER errors of NIC and GPU PCIe functions by severity "
           "(pcie_aer_errors: correctable warns, nonfatal and fatal are critical).", "short",
           [target(f"increase(roce_pcie_aer_errors_total{{{c.n}}}[{RI}])",
                   "{{instance}} {{role}} {{pci}} {{severity}}")]),
        ts("PCIe AER errors on bridge ports", "AER errors the root ports and PCIe switch "
           "ports on NIC and GPU paths counted, by severity (pcie_bridge_aer_errors). The "
           "port above a NIC counts the errors of what the NIC sends (its DMA writes, "
           "GPUDirect RDMA into GPU memory): link=nic is that port; netdevs and gpus are "
           "what the port serves.", "short",
           [target(f"increase(roce_pcie_bridge_aer_errors_total{{{c.n}}}[{RI}])",
                   "{{instance}} {{pci}} ({{link}}: {{netdevs}} {{gpus}}) {{severity}}")]),
        ts("devlink health reporters in error", "NIC devlink health reporters (fw, fw_fatal, "
           "tx, rx, ...) not healthy (devlink_reporter_error).", "short",
           [target(f"roce_devlink_reporter_healthy{{{c.n}}} == 0",
                   "{{instance}} {{netdev}} {{reporter}}")]),
        port_rate("Transmit wait", "Ticks the port had data to send but no flow-control "
                  "credits (port_xmit_wait): back-pressure from the peer.",
                  "roce_port_transmit_wait_total", unit="short"),
        port_rate("Collector read errors", "Single reads (files, netlink, ioctls) that "
                  "failed.", "roce_collector_errors_total"),
    ]
    # the last panel is per collector, not per port
    panels[-1]["targets"][0]["expr"] = f"rate(roce_collector_errors_total{{{c.n}}}[{RI}])"
    panels[-1]["targets"][0]["legendFormat"] = "{{instance}} {{collector}}"
    return dashboard(c, "roce-errors", "RoCE / Errors",
                     "Symbol errors and BER, retransmissions, sequence errors, link flaps; "
                     "FEC (rate, per lane, past FEC), optics, carrier transitions, PCIe AER "
                     "(NICs, GPUs and the bridge ports of their paths), devlink health.",
                     panels, params)


def topology(c, params):
    d = c.d
    panels = [
        table("GPU to NIC paths", "PCIe path class between every GPU and RDMA device, as "
              "nvidia-smi topo -m names it (PIX best, SYS worst).", "none",
              f"roce_gpu_nic_path_info{{{d}}}", hide=["Value"], w=12),
        table("Nearest NIC per GPU", "The RDMA device(s) with the best path class from each "
              "GPU.", "none", f"roce_gpu_nearest_nic_info{{{d}}}", hide=["Value"], w=12),
        table("GPUs", "GPUs in PCI bus order, with NUMA node.", "none",
              f"roce_gpu_info{{{c.n}}}", hide=["Value"], w=12),
        table("RDMA devices", "NUMA node and PCI address of each RDMA device.", "none",
              f"roce_device_info{{{d}}}", hide=["Value"], w=12),
        ts("GPU PCIe throughput (dcgm-exporter)", "What dcgm-exporter measures on each GPU's "
           "PCIe link (DCGM_FI_PROF_PCIE_RX_BYTES and _TX_BYTES, headers included), by our "
           "GPU index: GPUDirect RDMA traffic of the GPU's nearest NIC crosses it. Joined on "
           "dcgm-exporter's Hostname (or hostname) and pci_bus_id through "
           "dcgm_exporter_gpu:roce_gpu:info (docs/deploy.md); empty without dcgm-exporter.",
           "Bps",
           [target(f"max by (cluster, {host}, pci_bus_id) (DCGM_FI_PROF_PCIE_{way}_BYTES"
                   f"{{{c.dcgm}}})\n"
                   f"* on (cluster, {host}, pci_bus_id) group_right ()\n"
                   f"dcgm_exporter_gpu:roce_gpu:info{{{c.n}}}",
                   "{{instance}} GPU {{gpu}} " + way.lower(), ref=f"{way}{host}")
            for way in ("RX", "TX") for host in ("Hostname", "hostname")], w=24),
        ts("PCIe link speed", "Per-lane speed of the GPUs and NICs (current, and max where "
           "it differs); of every bridge on the way to the root port too, and max always, with "
           "--collector.pcie_hops.", "si:T/s",
           [target(f"roce_pcie_link_speed_transfers_per_second{{{c.n}}}",
                   "{{instance}} {{pci_address}} {{device}} {{bound}}")]),
        ts("PCIe link width", "Lanes of the GPUs and NICs (every bridge too with "
           "--collector.pcie_hops).",
           "suffix: lanes",
           [target(f"roce_pcie_link_width_lanes{{{c.n}}}",
                   "{{instance}} {{pci_address}} {{device}} {{bound}}")]),
        table("PCIe downtrained links", "1 when a link runs below what both ends support.",
              "bool_yes_no", f"roce_pcie_link_downtrained{{{c.n}}}",
              rename={"Value": "downtrained"}),
        table("ACS request redirect", "ACS P2P Request Redirect on bridges between a GPU and "
              "its NIC (enabled sends peer-to-peer traffic through the root complex).", "none",
              f"roce_pcie_acs_request_redirect{{{c.n}}} == 1", hide=["Value"], w=12),
        table("GPUDirect RDMA", "Whether GPUDirect RDMA can work, per mechanism.",
              "bool_yes_no", f"roce_gpudirect_rdma_ready{{{c.n}}}",
              rename={"Value": "ready"}, w=12),
        table("GPUDirect prerequisites", "Prerequisites of each GPUDirect mechanism.",
              "bool_yes_no", f"roce_gpudirect_rdma_prerequisite{{{c.n}}}",
              rename={"Value": "met"}),
        table("Cabling", "The switch (system name) and switch port each RDMA port reaches, "
              "by LLDP (lldp.mode lldpd or capture), with the GPUs whose nearest NIC it is "
              "(gpus, from the PCIe topology: two when a NIC serves two GPUs; empty for a NIC "
              "nearest to none); the rail verdict is on the fleet dashboard's \"Cabling\".",
              "none",
              f"max by (instance, device, port, netdev, gpus, system_name, port_id, chassis_id) (\n"
              f"  {CABLING_GPUS.format(info=f'roce_lldp_neighbor_info{{{d}}}', gpus=f'roce_nic_nearest_gpus_info{{{d}}}', by='instance, device', port='instance, device, port')}\n)",
              hide=["Value"], order=["instance", "device", "port", "netdev", "gpus",
                                     "system_name", "port_id", "chassis_id"]),
    ]
    return dashboard(c, "roce-topology", "RoCE / GPU-NIC topology",
                     "GPU × NIC path classes, NUMA, PCIe link state and GPUDirect.",
                     panels, params)


def probes(c, params):
    d = c.d
    bucket = f"roce_probe_rtt_seconds_bucket{{{d}}}"
    panels = [
        panel("heatmap", "Probe RTT", "Distribution of loopback probe round trip times.", "s",
              [target(f"sum by (le) (increase({bucket}[{RI}]))", "{{le}}", fmt="heatmap")],
              w=24, h=9,
              options={"calculate": False, "yAxis": {"unit": "s"},
                       "cellGap": 1, "color": {"mode": "scheme", "scheme": "Spectral"}}),
        ts("Probe RTT p50 / p99", "Quantiles of the probe RTT per port and operation.", "s",
           [target(f"histogram_quantile(0.5, sum by (instance, device, port, op, le) "
                   f"(rate({bucket}[{RI}])))", "{{instance}} {{device}}/{{port}} {{op}} p50"),
            target(f"histogram_quantile(0.99, sum by (instance, device, port, op, le) "
                   f"(rate({bucket}[{RI}])))", "{{instance}} {{device}}/{{port}} {{op}} p99")]),
        ts("Probe failures by reason", "Failed probes per second, by reason.", "cps",
           [target(f"sum by (instance, device, port, reason) "
                   f"(rate(roce_probe_failures_total{{{d}}}[{RI}]))",
                   "{{instance}} {{device}}/{{port}} {{reason}}")]),
        panel("state-timeline", "Probe success", "1 when the port's last probe round "
              "succeeded.", "bool_yes_no",
              [target(f"roce_probe_success{{{d}}}", "{{instance}} {{device}}/{{port}}")],
              w=24, h=6, options={"showValue": "never", "mergeValues": True}),
        ts("Probe requests", "Probes sent per second.", "cps",
           [target(f"rate(roce_probe_requests_total{{{d}}}[{RI}])",
                   "{{instance}} {{device}}/{{port}}")]),
        ts("Time since last successful probe", "Age of each port's last successful probe.",
           "s",
           [target(f"time() - roce_probe_last_success_timestamp_seconds{{{d}}}",
                   "{{instance}} {{device}}/{{port}}")]),
        ts("Probe failure ratio", "Failed probes over probes sent.", "percentunit",
           [target(f"sum by (instance, device, port) "
                   f"(rate(roce_probe_failures_total{{{d}}}[{RI}]))\n"
                   f"  / sum by (instance, device, port) "
                   f"(rate(roce_probe_requests_total{{{d}}}[{RI}]))",
                   "{{instance}} {{device}}/{{port}}")]),
    ]
    return dashboard(c, "roce-probes", "RoCE / Probes",
                     "Loopback probe RTT and failures by reason.", panels, params)


def rule_default(rule_id, key):
    """A threshold of the exporter's rule table (docs/rules.json), so the
    fleet panels draw the line the exporter judges by."""
    with open(RULES_JSON, encoding="utf-8") as f:
        for r in json.load(f)["rules"]:
            if r["id"] == rule_id:
                return r["config"]["defaults"][key]
    raise KeyError(f"{rule_id}.{key} not in docs/rules.json")


def with_threshold(p, value, color="red"):
    """A dashed threshold line (time series) or cell colour (tables) at value."""
    d = p["fieldConfig"]["defaults"]
    d["thresholds"] = {"mode": "absolute",
                       "steps": [{"color": "green", "value": None},
                                 {"color": color, "value": value}]}
    if p["type"] == "timeseries":
        d["custom"]["thresholdsStyle"] = {"mode": "dashed"}
    else:
        d["custom"] = {"cellOptions": {"type": "color-text"}}
    return p


def node_links(p):
    """Data links from a table's instance (and device) cells into the node
    dashboards, keeping the time range."""
    url = ("/d/{uid}?var-instance=${{__data.fields.instance}}&var-device=${{__data.fields.device}}"
           "&${{__url_time_range}}")
    p["fieldConfig"]["overrides"].append({
        "matcher": {"id": "byName", "options": "instance"},
        "properties": [{"id": "links", "value": [
            {"title": title, "url": url.format(uid=uid)}
            for uid, title in (("roce-overview", "Node overview"),
                               ("roce-congestion", "Node congestion"),
                               ("roce-errors", "Node errors"))]}]})
    return p


# The fleet dashboard's panels: (title, description, unit, recorded series,
# rule threshold or None). Adding a family later (FEC, optics, NCCL, peer
# probes, QoS) is one entry here once its recording rule exists.
FLEET_TOPK = [
    ("PFC pause ratio", "Most paused priority of each port (seconds paused per second).",
     "percentunit", "instance_device_port:roce_pfc_pause_ratio:max_rate",
     ("pfc_storm", "pause_ratio")),
    ("ECN marks per packet", "ECN-marked RoCE packets per packet received.", "percentunit",
     "instance_device_port:roce_ecn_marked_per_packet:ratio_rate",
     ("receiver_congested", "max_ratio")),
    ("CNPs sent per packet", "CNPs sent (notification point) per packet received.",
     "percentunit", "instance_device_port:roce_cnp_sent_per_packet:ratio_rate", None),
    ("Lossless discards", "Packets discarded on PFC-enabled priorities per second.", "pps",
     "instance_device_port:roce_lossless_discards:rate", ("lossless_discards", "per_second")),
    ("Bit error rate", "Symbol errors per bit at the port's rate.", "sci",
     "instance_device_port:roce_bit_error_rate:ratio_rate", ("symbol_errors", "max_ber")),
    ("Link flaps", "Link-down events within the rate range.", "short",
     "instance_device_port:roce_link_flaps:increase", None),
    ("Probe loss", "Failed probe rounds per round attempted.", "percentunit",
     "instance_device_port:roce_probe_loss:ratio_rate", ("probe_failures", "max_ratio")),
    ("Peer probe loss", "Probes between hosts (peer_probes) not answered, per probe sent; "
     "the node's /findings says whether the port, a peer or one path is at fault.",
     "percentunit", "instance_device_port:roce_peer_probe_loss:ratio_rate", None),
    ("FEC uncorrectable blocks", "Blocks the FEC could not correct per second: frames "
     "lost on the wire (cable, optic, switch port).", "cps",
     "instance_device_port:roce_fec_uncorrectable:rate", None),
]
# Per-node tables for what is per PCI function or per job rather than per
# RDMA port: (title, description, unit, expression over the node selector).
FLEET_NODE_TOPK = [
    ("PCIe AER errors", "PCIe AER errors per second of the node's NICs and GPUs and of "
     "the bridge ports on their paths, by severity (correctable: a marginal link; "
     "nonfatal and fatal: lost transactions).",
     "cps", "instance:roce_pcie_aer_errors:sum_rate"),
    ("devlink reporters unhealthy", "NIC health reporters (devlink health) in error "
     "state: firmware, tx/rx queues, PCIe.", "none", "instance:roce_devlink_unhealthy:count"),
    ("NCCL connections over sockets", "NET connections NCCL jobs set up over TCP "
     "sockets (NET/Socket) instead of RDMA in the window.", "none",
     "instance:roce_nccl_socket_connections:sum"),
]
FLEET_TOPK_N = 10


MATCHER = re.compile(r'\s*(\w+)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*,?')


def fleet_selector(selector):
    """(the selector with its `job` matcher replaced by the `$job`
    variable, the other matchers, the selector's job): the fleet dashboard
    compares the jobs the variable picks."""
    rest, job = [], None
    for name, op, value in MATCHER.findall(selector):
        if name == "job":
            job = json.loads(value) if op == "=" else None
        else:
            rest.append(f"{name}{op}{value}")
    others = ", ".join(rest)
    return ", ".join(rest + ['job=~"$job"']), others, job


def fleet_variables(c, others, default_job):
    out = variables(c, one_instance=False)

    def query_var(name, label, query):
        v = dict(out[1], name=name, label=label, definition=query,
                 query={"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"})
        return v

    # cluster (an external or target label) may be absent: All matches it empty.
    info = "roce_exporter_build_info" + (f"{{{others}}}" if others else "")
    cluster = query_var("cluster", "Cluster", f"label_values({info}, cluster)")
    cluster["allValue"] = ".*"
    # every job that runs roce_exporter; the generator's selector's job first
    job = query_var("job", "Job", f"label_values({info}, job)")
    if default_job:
        job["current"] = {"selected": True, "text": [default_job], "value": [default_job]}
    return [out[0], cluster, job] + out[1:]


def fleet_peer_probe_panels(c):
    """The peer-probe verdicts across nodes (alerts/generate.py, group
    roce_exporter.fleet.peer_probes of roce_exporter.fleet.rules.yml): which
    node the others lose, which port loses its peers, which path between two
    ports alone, which switch. A line at one half: above it, the verdict."""
    fs = f'{c.base}, cluster=~"$cluster"'
    fd = f'{fs}, instance=~"$instance", device=~"$device"'
    n = FLEET_TOPK_N
    return [
        # peer: and switch: series aggregate over the probing instances.
        with_threshold(table(
            f"Peer probes: top {n} nodes lost by their probers",
            "Share of the ports probing a node's port that lose at least two of their last 16 "
            "small probes to it; above one half (with at least two probers) the node is named "
            "(RocePeerProbeNodeUnreachable): down, its exporter stopped, or its port.",
            "percentunit", f"topk({n}, peer:roce_peer_probe_losing_probers:ratio{{{fs}}})",
            rename={"Value": "probers losing it"}, w=12), 0.5),
        with_threshold(node_links(table(
            f"Peer probes: top {n} ports losing their peers",
            "Share of a port's peers (those the other nodes reach) it loses probes to; above "
            "one half (with at least two peers) the port is named "
            "(RocePeerProbePortLosesPeers): its NIC, cable or switch port.",
            "percentunit",
            f"topk({n}, instance_device_port:roce_peer_probe_losing_peers:ratio{{{fd}}})",
            rename={"Value": "peers lost"}, w=12)), 0.5),
        node_links(table(
            f"Peer probes: top {n} lossy paths",
            "Pairs of ports losing at least two of their last 16 small probes while neither end "
            "is named above: the path between the two (RocePeerProbePairLoss).", "none",
            f"topk({n}, instance_device_port_peer:roce_peer_probe_path_lost:count{{{fd}}})",
            rename={"Value": "lost of 16"}, w=12)),
        with_threshold(table(
            f"Peer probes: top {n} switches losing their ports' peers",
            "Share of the probing ports cabled to a switch (LLDP) that lose their peers; above "
            "one half the switch is named (RocePeerProbeSwitchLosesPeers). Empty without an "
            "LLDP neighbour series.", "percentunit",
            f"topk({n}, switch:roce_peer_probe_isolated_ports:ratio{{{fs}}})",
            rename={"Value": "ports losing peers"}, w=12), 0.5),
    ]


# Each LLDP neighbour series ({info}) with the GPUs whose nearest NIC its
# device is ({gpus}: roce_nic_nearest_gpus_info, one series per NIC), kept
# without them (empty gpus) where the NIC is nearest to no GPU or the
# topology source is off.
CABLING_GPUS = ("{info} * on ({by}) group_left (gpus) {gpus}\n"
                "  or on ({port}) {info}")


def fleet_cabling_panels(c, fs, fd):
    """Cabling from each RDMA port's LLDP neighbour: every port with its
    GPU(s), switch, switch port and rail verdict, and the ports off their
    pod's rail (the RoceLldpRailOddOneOut verdict, from the fleet recording
    rules). Each node's own cabling is also on its topology dashboard."""
    switch_pod = f"instance_device:roce_lldp_switch:pod{{{fs}}}"
    nodes = f"pod_device_switch:roce_lldp_nodes:count{{{c.base}}}"
    by = "job, pod, device"
    off_rail = (f"(\n  {switch_pod}\n  * on ({by}, system_name) group_left ()\n"
                f"  {nodes}\n)\n< on ({by}) group_left ()\nmax by ({by}) ({nodes})")
    # The pod's nodes on each port's switch against the most of the pod
    # on one switch for that NIC: fewer is the odd one out (the alert's
    # expression), as many is on the rail; a node without a pod is not
    # judged. Values rank the rows: WRONG 2, not judged 1, ok 0.
    on_switch = (f"{switch_pod}\n      * on ({by}, system_name) group_left ()\n"
                 f"      {nodes}")
    most = f"max by ({by}) ({nodes})"
    port = "job, instance, device, port"
    ports = CABLING_GPUS.format(info=f"roce_lldp_neighbor_info{{{fd}}}",
                                gpus=f"roce_nic_nearest_gpus_info{{{fd}}}",
                                by="job, instance, device", port=port)
    ports = f"(\n    {ports}\n  )"
    judged = "job, instance, device, system_name"

    def verdict(value, cmp, rail):
        return (f"label_replace(\n    {ports}\n    * on ({judged}) group_left ()\n"
                f"    (0 * ({on_switch}\n      {cmp} on ({by}) group_left () {most}) + {value}),\n"
                f"    \"rail\", \"{rail}\", \"\", \"\"\n  )")
    cabling = (f"sort_desc(max by (instance, device, gpus, system_name, port_id, rail) (\n"
               f"  {verdict(2, '<', 'WRONG')}\n"
               f"  or on ({port})\n  {verdict(0, '>=', 'ok')}\n"
               f"  or on ({port})\n  label_replace(0 * {ports} + 1, \"rail\", \"not judged\", "
               f"\"\", \"\")\n))")
    return [
        node_links(table(
            "Cabling",
            "Every RDMA port by its LLDP neighbour: node, NIC, the GPUs whose nearest NIC it "
            "is (from the PCIe topology; two when a NIC serves two GPUs), the switch (system "
            "name) and switch port, and the rail verdict without a cabling plan: ok when the "
            "NIC reaches the switch most nodes of its pod reach with that NIC, WRONG when "
            "another (RoceLldpRailOddOneOut), not judged when the node has no pod (its first "
            "NIC reports none or two neighbours). WRONG rows first. Empty without LLDP.",
            "none", cabling, hide=["Value"],
            order=["instance", "device", "gpus", "system_name", "port_id", "rail"],
            rename={"gpus": "GPUs", "system_name": "switch", "port_id": "switch port"},
            w=12)),
        node_links(table(
            "Cabling: NICs off their pod's rail",
            "RDMA ports whose LLDP neighbour is another switch than the same NIC of most "
            "nodes of their pod (the pod: the switch a node's first NIC reaches); the value "
            "is how many of the pod's nodes share that switch (RoceLldpRailOddOneOut). Empty "
            "on a fleet cabled right, and without LLDP.", "none", off_rail,
            rename={"Value": "nodes on that switch"}, w=12)),
    ]


def fleet(c, params):
    selector, others, default_job = fleet_selector(c.base)
    c = Ctx(selector, params)
    fs = f'{c.base}, cluster=~"$cluster", instance=~"$instance"'
    fd = f'{fs}, device=~"$device"'
    # rail: series have no instance (they aggregate over the nodes).
    rd = f'{c.base}, cluster=~"$cluster", device=~"$device"'
    trouble = 'severity=~"critical|warning"'
    panels = [
        stat("Nodes reporting", "Exporters scraped successfully.", "none",
             f"count(up{{{fs}}} == 1) or vector(0)"),
        stat("Nodes in trouble", "Nodes with an active critical or warning finding.", "none",
             f"count(sum by (cluster, job, instance) "
             f"(instance_rule:roce_findings:count{{{fs}, {trouble}}})) or vector(0)",
             thresholds=[(1, "red")]),
        stat("Ports in trouble", "Ports down or with an active critical or warning finding.",
             "none",
             f"count(\n  count by (cluster, job, instance, device, port) "
             f"(roce_finding{{{fd}, port!=\"\", {trouble}}} == 1)\n"
             f"  or count by (cluster, job, instance, device, port) (roce_port_up{{{fd}}} == 0)\n"
             f") or vector(0)", thresholds=[(1, "red")]),
        stat("Ports down", "RDMA ports not ACTIVE and LinkUp.", "none",
             f"sum(instance:roce_ports_down:count{{{fs}}}) or vector(0)",
             thresholds=[(1, "red")]),
        stat("Critical findings", "Active critical findings in the fleet.", "none",
             f'sum(instance_rule:roce_findings:count{{{fs}, severity="critical"}}) or vector(0)',
             thresholds=[(1, "red")]),
        stat("Warning findings", "Active warning findings in the fleet.", "none",
             f'sum(instance_rule:roce_findings:count{{{fs}, severity="warning"}}) or vector(0)',
             thresholds=[(1, "orange")]),
        table("Findings by rule", "Active findings per rule and severity across the fleet.",
              "none", f"sum by (rule, severity) (instance_rule:roce_findings:count{{{fs}}})",
              rename={"Value": "findings"}, w=12),
        node_links(table("Nodes with findings", "Nodes by active findings; the instance "
                         "links to the node dashboards.", "none",
                         f"sort_desc(sum by (instance) "
                         f"(instance_rule:roce_findings:count{{{fs}, {trouble}}}))",
                         rename={"Value": "findings"}, w=12)),
    ]
    for title, description, unit, record, threshold in FLEET_TOPK:
        p = node_links(table(f"Top {FLEET_TOPK_N} ports: {title}", description, unit,
                             f"topk({FLEET_TOPK_N}, {record}{{{fd}}})",
                             rename={"Value": title}, w=12))
        if threshold:
            with_threshold(p, rule_default(*threshold))
        panels.append(p)
    for title, description, unit, record in FLEET_NODE_TOPK:
        panels.append(node_links(table(f"Top {FLEET_TOPK_N} nodes: {title}", description, unit,
                                       f"topk({FLEET_TOPK_N}, {record}{{{fs}}})",
                                       rename={"Value": title}, w=8)))
    panels += fleet_peer_probe_panels(c)
    panels += fleet_cabling_panels(c, fs, fd)
    for title, description, unit, record, threshold in FLEET_TOPK:
        metric, op = record.split(":", 1)[1].split(":")
        agg = "sum" if op in ("rate", "increase") else "max"
        p = ts(f"Per rail: {title}", description + " Per rail: the same device and port "
               f"on every node ({agg} over nodes).", unit,
               [target(f"rail:{metric}:{agg}_{op}{{{rd}}}", "{{device}}/{{port}}")], w=8)
        if threshold:
            with_threshold(p, rule_default(*threshold))
        panels.append(p)
    panels.append(ts("Per rail: ports down", "Ports not up per rail.", "none",
                     [target(f"rail:roce_ports_down:count{{{rd}}}", "{{device}}/{{port}}")],
                     w=8))
    timeline = panel(
        "state-timeline", "Port state (ports down within the range)",
        "roce_port_up of the ports that were down at some point within the time range.",
        "none",
        [target(f"roce_port_up{{{fd}}}\n  and on (cluster, job, instance, device, port)\n"
                f"  (min_over_time(roce_port_up{{{fd}}}[$__range]) == 0)",
                "{{instance}} {{device}}/{{port}}")], w=24, h=8,
        options={"showValue": "never", "mergeValues": True, "rowHeight": 0.9})
    timeline["fieldConfig"]["defaults"]["mappings"] = [{"type": "value", "options": {
        "0": {"text": "down", "color": "red", "index": 0},
        "1": {"text": "up", "color": "green", "index": 1}}}]
    timeline["fieldConfig"]["defaults"]["color"] = {"mode": "thresholds"}
    panels.append(timeline)
    return dashboard(c, "roce-fleet", "RoCE / Fleet",
                     "The fleet on recording rules (alerts/roce_exporter.recording.rules.yml): "
                     "nodes and ports in trouble, top ports, rails.", panels, params,
                     templating=fleet_variables(c, others, default_job))


BUILDERS = [
    ("roce-overview.json", overview),
    ("roce-congestion.json", congestion),
    ("roce-errors.json", errors),
    ("roce-topology.json", topology),
    ("roce-probes.json", probes),
    ("roce-fleet.json", fleet),
]


def render(params):
    global RI
    RI = rate_range(params.get("scrape_interval", DEFAULTS["scrape_interval"]))
    c = Ctx(params["selector"], params)
    return {name: json.dumps(build(c, params), indent=2, ensure_ascii=False) + "\n"
            for name, build in BUILDERS}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=HERE)
    p.add_argument("--selector", default=DEFAULTS["selector"])
    p.add_argument("--scrape-interval", type=int, default=DEFAULTS["scrape_interval"],
                   help="Prometheus' scrape interval in seconds (rate ranges are 4x it)")
    p.add_argument("--node-exporter-selector", default=DEFAULTS["node_exporter_selector"],
                   help="matchers of node_exporter's series (none: any job)")
    p.add_argument("--dcgm-selector", default=DEFAULTS["dcgm_selector"],
                   help="matchers of dcgm-exporter's series (none: any job)")
    args = p.parse_args(argv)
    params = dict(DEFAULTS, selector=args.selector, scrape_interval=args.scrape_interval,
                  node_exporter_selector=args.node_exporter_selector,
                  dcgm_selector=args.dcgm_selector)
    os.makedirs(args.out, exist_ok=True)
    for name, text in render(params).items():
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
