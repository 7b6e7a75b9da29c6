"""The fleet proof of tests/monitoring/run.py (`run.py fleet`): a synthetic
TSDB of NODES nodes with PORTS RDMA ports each, written as OpenMetrics and
turned into blocks by `promtool tsdb create-blocks-from openmetrics`, in
which one port (STORM) storms: PFC pauses, ECN marks and CNPs, lossless
discards, symbol errors, link flaps, probe loss, a pfc_storm finding and a
port down at the end. A real Prometheus loads the blocks with the generated
recording rules (alerts/generate.py); then every query of the "RoCE / Fleet"
dashboard must find that port (its instance, or its rail, on top; a count
at least 1), and each query's time is printed.

The samples end at the moment of generation, one per SCRAPE seconds, so the
rules' rate ranges (4x SCRAPE) evaluated by Prometheus right after start
hold several of them.
"""

import json
import time
import urllib.parse
import urllib.request

NODES = 1000
PORTS = 8
SCRAPE = 60
SAMPLES = 6
LOSSLESS = 3  # the priority with PFC on
CLUSTER = "fleet-a"
JOB = "roce_exporter"
STORM = {"instance": "node0421:9879", "device": "mlx5_3", "port": "1"}
RATE_BYTES = 50e9  # 400 Gb/s


def port_labels(node, dev):
    return (f'cluster="{CLUSTER}",job="{JOB}",instance="node{node:04d}:9879",'
            f'device="mlx5_{dev}",port="1"')


def is_storm(node, dev):
    return f"node{node:04d}:9879" == STORM["instance"] and f"mlx5_{dev}" == STORM["device"]


def write_openmetrics(path, now):
    """The synthetic fleet as OpenMetrics, one family after the other."""
    times = [now - SCRAPE * (SAMPLES - 1 - i) for i in range(SAMPLES)]
    ports = [(n, d) for n in range(NODES) for d in range(PORTS)]

    def counter(f, name, per_second, extra=""):
        """per_second(node, dev) -> rate, or None for no series."""
        f.write(f"# TYPE {name} counter\n")
        for n, d in ports:
            r = per_second(n, d)
            if r is None:
                continue
            labels = port_labels(n, d) + (extra(d) if callable(extra) else extra)
            for i, t in enumerate(times):
                f.write(f"{name}_total{{{labels}}} {r * SCRAPE * (i + 10)} {t}\n")

    def gauge(f, name, value, extra=""):
        f.write(f"# TYPE {name} gauge\n")
        for n, d in ports:
            labels = port_labels(n, d) + extra
            for i, t in enumerate(times):
                v = value(n, d, i)
                if v is not None:
                    f.write(f"{name}{{{labels}}} {v} {t}\n")

    storm = is_storm
    pps = 1e6
    with open(path, "w", encoding="utf-8") as f:
        netdev = lambda d: f',netdev="ens{d}np0",priority="{LOSSLESS}"'  # noqa: E731
        f.write("# TYPE roce_pfc_pause_duration_seconds counter\n")
        for n, d in ports:
            for direction in ("rx", "tx"):
                r = 0.95 if storm(n, d) and direction == "rx" else 0.001
                labels = port_labels(n, d) + netdev(d) + f',direction="{direction}"'
                for i, t in enumerate(times):
                    f.write(f"roce_pfc_pause_duration_seconds_total{{{labels}}} "
                            f"{r * SCRAPE * (i + 10)} {t}\n")
        counter(f, "roce_port_packets_received", lambda n, d: pps)
        counter(f, "roce_port_packets_transmitted", lambda n, d: pps)
        counter(f, "roce_ecn_marked_packets", lambda n, d: pps * (0.4 if storm(n, d) else 0.001))
        counter(f, "roce_cnp_sent", lambda n, d: pps * (0.35 if storm(n, d) else 0.001))
        counter(f, "roce_cnp_handled", lambda n, d: pps * 0.001)
        counter(f, "roce_port_symbol_errors", lambda n, d: 400.0 if storm(n, d) else 0.0)
        counter(f, "roce_port_link_downed", lambda n, d: 1 / SCRAPE if storm(n, d) else 0.0)
        counter(f, "roce_netdev_priority_discards",
                lambda n, d: 500.0 if storm(n, d) else 0.0,
                lambda d: netdev(d) + ',reason="rx_port"')
        counter(f, "roce_probe_requests", lambda n, d: 1.0)
        counter(f, "roce_probe_failures", lambda n, d: 0.5 if storm(n, d) else None,
                ',reason="timeout"')
        counter(f, "roce_peer_probe_sent", lambda n, d: 5.0, ',size="small"')
        counter(f, "roce_peer_probe_answered", lambda n, d: 3.0 if storm(n, d) else 5.0,
                ',size="small"')
        counter(f, "roce_fec_uncorrectable_blocks", lambda n, d: 20.0 if storm(n, d) else 0.0,
                lambda d: f',netdev="ens{d}np0",lane=""')
        gauge(f, "roce_port_rate_bytes_per_second", lambda n, d, i: RATE_BYTES)
        gauge(f, "roce_port_up",
              lambda n, d, i: (0 if i in (1, SAMPLES - 1) else 1) if storm(n, d) else 1)
        f.write("# TYPE roce_pfc_enabled gauge\n")
        for n, d in ports:
            labels = port_labels(n, d) + netdev(d)
            for t in times:
                f.write(f"roce_pfc_enabled{{{labels}}} 1 {t}\n")
        f.write("# TYPE roce_finding gauge\n")
        for rule, severity in (("pfc_storm", "critical"), ("receiver_congested", "warning")):
            labels = (f'cluster="{CLUSTER}",job="{JOB}",instance="{STORM["instance"]}",'
                      f'device="{STORM["device"]}",port="1",netdev="ens3np0",'
                      f'rule="{rule}",severity="{severity}"')
            for t in times:
                f.write(f"roce_finding{{{labels}}} 1 {t}\n")
        # Per node (a NIC's PCI function, a job): on the storm node only.
        def node_series(name, kind, extra, value, rate=False):
            f.write(f"# TYPE {name} {kind}\n")
            labels = (f'cluster="{CLUSTER}",job="{JOB}",instance="{STORM["instance"]}",'
                      f'device="{STORM["device"]}",{extra}')
            suffix = "_total" if kind == "counter" else ""
            for i, t in enumerate(times):
                v = value * SCRAPE * (i + 10) if rate else value
                f.write(f"{name}{suffix}{{{labels}}} {v} {t}\n")
        node_series("roce_pcie_aer_errors", "counter",
                    'pci="0000:3b:00.0",role="nic",netdev="ens3np0",severity="correctable"',
                    2.0, rate=True)
        node_series("roce_devlink_reporter_healthy", "gauge",
                    'netdev="ens3np0",pci="0000:3b:00.0",reporter="tx",devlink_port=""', 0)
        node_series("roce_nccl_connections", "gauge",
                    'port="0",net="Socket",transport="socket",gdr="off"', 16)
        for name in ("roce_exporter_build_info", "up"):
            f.write(f"# TYPE {name} gauge\n")
            for n in range(NODES):
                labels = f'cluster="{CLUSTER}",job="{JOB}",instance="node{n:04d}:9879"'
                for t in times:
                    f.write(f"{name}{{{labels}}} 1 {t}\n")
        f.write("# EOF\n")
    return len(ports)


def query(prom, expr):
    """(result, seconds) of an instant query."""
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    start = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.loads(r.read().decode())
    took = time.monotonic() - start
    if body.get("status") != "success":
        raise RuntimeError(f"query failed: {expr}: {body}")
    return body["data"]["result"], took


def finds_storm(result):
    """Whether a panel's result points at the storming port: the series
    with the largest value carries its instance (and device) where the
    result has those labels; a count without them is at least 1."""
    if not result:
        return False, "no data"
    def storm_labels(labels):
        return all(labels.get(k, STORM[k]) == STORM[k] for k in ("instance", "device"))

    top = max(result, key=lambda s: float(s["value"][1]))
    labels, value = top["metric"], float(top["value"][1])
    if "instance" in labels or "device" in labels:
        where = f"{labels.get('instance', '')} {labels.get('device', '')}"
        if all(storm_labels(s["metric"]) for s in result):
            return True, f"only {where} ({len(result)} series) = {value:g}"
        if not storm_labels(labels) or value <= 0:
            return False, f"top series is {labels} = {value}"
        return True, f"top {where} = {value:g} of {len(result)} series"
    return value >= 1, f"value {value:g}"
