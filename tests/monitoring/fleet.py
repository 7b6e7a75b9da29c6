"""The fleet proof of tests/monitoring/run.py (`run.py fleet`): a synthetic
TSDB of NODES nodes with PORTS RDMA ports each, written as OpenMetrics and
turned into blocks by `promtool tsdb create-blocks-from openmetrics`, in
which one port (STORM) storms: PFC pauses, ECN marks and CNPs, lossless
discards, symbol errors, link flaps, probe loss, a pfc_storm finding and a
port down at the end. The peer probes between the nodes carry four faults
of their own: a dead node (DEAD: not scraped, every prober loses it), a
black-holed port (BLACKHOLE), one lossy path (LOSSY, both ways) and a leaf
switch down (SWITCH_DOWN: its ports and the ports behind it), with an LLDP
series naming every port's leaf, one of them on the wrong rail (MISCABLED). A real Prometheus loads the blocks with
the generated recording rules and the fleet alerts (alerts/generate.py);
then every query of the "RoCE / Fleet" dashboard must find its culprit
(`culprits`: the storming port, or for the peer-probe panels the fault
they localize; its instance, or its rail, on top; a count at least 1), each
query's time is printed, and the peer-probe alerts must name exactly the
faults and the cabling alerts the miscabled port (`expected_peer_alerts`).

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

# Peer probes: port (n, d) probes SAMPLE peers of its rail now (n+1+125k),
# and exposes EXTRA more it lost probes to lately (the exporter's "top
# failing others"); roce_peer_probe_peer_lost counts the lost ones of a
# pair's last 16 small probes.
SAMPLE = 8
EXTRA = 16
DEAD = 77  # node down: no series, `up` 0
BLACKHOLE = (333, 5)  # node, device: drops RoCE both ways
LOSSY = {(500, 2, 626): 5, (626, 2, 500): 4}  # (prober, device, peer): lost
LEAF_NODES = 32  # nodes per leaf switch and rail
SWITCH_DOWN = (6, 22)  # device (rail), leaf: nodes 704-735 of rail 6
# A cable on the wrong rail: mlx5_4 of node 250 reaches rail 5's leaf of its
# pod, where the pod's other nodes reach rail 4's.
MISCABLED = {"instance": "node0250:9879", "device": "mlx5_4", "port": "1"}


def port_labels(node, dev):
    return (f'cluster="{CLUSTER}",job="{JOB}",instance="node{node:04d}:9879",'
            f'device="mlx5_{dev}",port="1"')


def is_storm(node, dev):
    return f"node{node:04d}:9879" == STORM["instance"] and f"mlx5_{dev}" == STORM["device"]


def node_name(n):
    return f"node{n:04d}"


def leaf(n, d):
    return f"leaf-{d}-{n // LEAF_NODES:02d}"


def is_miscabled(n, d):
    return (f"node{n:04d}:9879", f"mlx5_{d}") == (MISCABLED["instance"], MISCABLED["device"])


def cabled_leaf(n, d):
    """The leaf a port's LLDP neighbour names: its rail's, but for MISCABLED
    (the next rail's leaf of its pod)."""
    return leaf(n, d + 1) if is_miscabled(n, d) else leaf(n, d)


def cabled_port(n, d):
    """The leaf port: one per node, a spare one for MISCABLED."""
    return f"swp{LEAF_NODES + 1}" if is_miscabled(n, d) else f"swp{n % LEAF_NODES + 1}"


def nearest_gpus(d):
    """roce_nic_nearest_gpus_info's gpus of NIC mlx5_<d>: two GPUs and two
    NICs behind each PCIe switch (as in the demo tree), so each NIC is the
    nearest of two GPUs."""
    g = d - d % 2
    return f"{g},{g + 1}"


def switch_down(n, d):
    return (d, n // LEAF_NODES) == SWITCH_DOWN


def pair_lost(n, d, t):
    """Lost of the last 16 small probes from port (n, d) to node t's port d."""
    if t == DEAD or BLACKHOLE in ((n, d), (t, d)) or switch_down(n, d) or switch_down(t, d):
        return 16
    if (n, d, t) in LOSSY:
        return LOSSY[(n, d, t)]
    return 1 if (n * 31 + d * 7 + t) % 97 == 0 else 0  # one in 16: noise


def peer_pairs():
    """{(prober, device, peer): lost} of every exposed pair."""
    pairs = {}

    def add(n, d, t):
        n, t = n % NODES, t % NODES
        if n != t and n != DEAD:
            pairs[(n, d, t)] = pair_lost(n, d, t)

    for n in range(NODES):
        for d in range(PORTS):
            for k in range(SAMPLE):
                add(n, d, n + 1 + 125 * k)
            # the ports that lose their peers expose the peers they lost
            if (n, d) == BLACKHOLE or switch_down(n, d):
                for k in range(EXTRA):
                    add(n, d, n + 63 + 62 * k)
    # the peers lost by many are among the top failing of many probers
    lost_by_many = [(DEAD, d) for d in range(PORTS)] + [BLACKHOLE] + [
        (n, SWITCH_DOWN[0]) for n in range(NODES) if switch_down(n, SWITCH_DOWN[0])]
    for t, d in lost_by_many:
        for k in range(EXTRA):
            add(t + 300 + 37 * k, d, t)
    for (n, d, t) in LOSSY:
        add(n, d, t)
    return pairs


def peer_port(n, d):
    return {"instance": f"{node_name(n)}:9879", "device": f"mlx5_{d}"}


def peer_target(n, d):
    return {"peer": node_name(n), "peer_device": f"mlx5_{d}/1"}


def lost_ports():
    """The ports that lose their peers (BLACKHOLE and those behind SWITCH_DOWN)."""
    return [BLACKHOLE] + [(n, SWITCH_DOWN[0]) for n in range(NODES)
                          if switch_down(n, SWITCH_DOWN[0])]


def expected_peer_alerts():
    """{alert name: [identifying labels]} the peer-probe and cabling fleet
    alerts must name, and nothing else."""
    down = f"leaf-{SWITCH_DOWN[0]}-{SWITCH_DOWN[1]:02d}"
    return {
        # named with their exporter's port (endpoint info; the dead node's
        # remembered) and, where LLDP is scraped, their switch
        "RocePeerProbeNodeUnreachable": [
            dict(peer_target(DEAD, d), **peer_port(DEAD, d), port="1") for d in range(PORTS)]
        + [dict(peer_target(n, d), **peer_port(n, d), port="1", system_name=leaf(n, d))
           for n, d in lost_ports()],
        "RocePeerProbePortLosesPeers": [
            dict(peer_port(n, d), port="1", system_name=leaf(n, d)) for n, d in lost_ports()],
        "RocePeerProbePairLoss": [dict(peer_port(n, d), port="1", **peer_target(t, d))
                                  for n, d, t in LOSSY],
        "RocePeerProbeSwitchLosesPeers": [{"system_name": down}],
        # the cabling verdicts (pending: their `for` outlasts the samples)
        "RoceLldpRailOddOneOut": [{"instance": MISCABLED["instance"],
                                   "device": MISCABLED["device"],
                                   "system_name": cabled_leaf(250, 4)}],
        "RoceLldpPodOfOne": [],
        "RoceLldpTwoNicsOneSwitchPort": [],
    }


def culprits(where):
    """What a fleet dashboard query must find on top: the storming port,
    or for the peer-probe panels the faults they localize."""
    if "Peer probes:" in where:
        if "nodes lost" in where:
            return expected_peer_alerts()["RocePeerProbeNodeUnreachable"]
        if "ports losing" in where:
            return [peer_port(n, d) for n, d in lost_ports()]
        if "lossy paths" in where:
            return [dict(peer_port(n, d), **peer_target(t, d)) for n, d, t in LOSSY]
        return expected_peer_alerts()["RocePeerProbeSwitchLosesPeers"]
    if "off their pod's rail" in where:
        return [MISCABLED]
    if where.startswith("roce-fleet/Cabling/"):  # every port, the WRONG one on top
        return [dict(MISCABLED, system_name=cabled_leaf(250, 4), gpus=nearest_gpus(4),
                     rail="WRONG")]
    if "Peer probe loss" in where:  # the loss of each port: the storm and the faults
        return [STORM] + [peer_port(n, d) for n, d in lost_ports()]
    return [STORM]


def write_openmetrics(path, now):
    """The synthetic fleet as OpenMetrics, one family after the other."""
    times = [now - SCRAPE * (SAMPLES - 1 - i) for i in range(SAMPLES)]
    ports = [(n, d) for n in range(NODES) if n != DEAD for d in range(PORTS)]

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

    def samples(f, name, labels, value, stamps=times):
        """`name{labels}` at `value` at each of `stamps`."""
        for t in stamps:
            f.write(f"{name}{{{labels}}} {value} {t}\n")

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

        def answered(n, d):
            if storm(n, d):
                return 3.0
            if (n, d) in lost_ports():
                return 0.0
            return 4.9 if (n, d) == (500, 2) else 5.0
        counter(f, "roce_peer_probe_answered", answered, ',size="small"')
        f.write("# TYPE roce_peer_probe_peer_lost gauge\n")
        # small probes only: the large ones (path MTU) are no part of the
        # verdicts, and half the series keep the proof quick
        for (n, d, t), lost in sorted(peer_pairs().items()):
            labels = (port_labels(n, d) + f',peer="{node_name(t)}",'
                      f'peer_device="mlx5_{d}/1",size="small"')
            samples(f, "roce_peer_probe_peer_lost", labels, lost)
        # every exporter's own responders; the dead node's until it died
        f.write("# TYPE roce_peer_probe_endpoint_info gauge\n")
        for n in range(NODES):
            for d in range(PORTS):
                labels = (port_labels(n, d) + f',node="{node_name(n)}",device_index="{d}",'
                          f'gid="::ffff:10.{d}.{n // 250}.{n % 250 + 1}",gid_index="3",'
                          f'qpn="{1000 + n}",mtu="4096"')
                stamps = times[:2] if n == DEAD else times
                samples(f, "roce_peer_probe_endpoint_info", labels, 1, stamps)
        f.write("# TYPE roce_lldp_neighbor_info gauge\n")
        for n, d in ports:
            labels = (port_labels(n, d) + f',netdev="ens{d}np0",'
                      f'system_name="{cabled_leaf(n, d)}",port_id="{cabled_port(n, d)}"')
            samples(f, "roce_lldp_neighbor_info", labels, 1)
        f.write("# TYPE roce_nic_nearest_gpus_info gauge\n")
        for n in range(NODES):
            if n == DEAD:
                continue
            for d in range(PORTS):
                labels = (f'cluster="{CLUSTER}",job="{JOB}",instance="node{n:04d}:9879",'
                          f'device="mlx5_{d}",gpus="{nearest_gpus(d)}"')
                samples(f, "roce_nic_nearest_gpus_info", labels, 1)
        counter(f, "roce_fec_uncorrectable_blocks", lambda n, d: 20.0 if storm(n, d) else 0.0,
                lambda d: f',netdev="ens{d}np0",lane=""')
        gauge(f, "roce_port_rate_bytes_per_second", lambda n, d, i: RATE_BYTES)
        gauge(f, "roce_port_up",
              lambda n, d, i: (0 if i in (1, SAMPLES - 1) else 1) if storm(n, d) else 1)
        f.write("# TYPE roce_pfc_enabled gauge\n")
        for n, d in ports:
            labels = port_labels(n, d) + netdev(d)
            samples(f, "roce_pfc_enabled", labels, 1)
        f.write("# TYPE roce_finding gauge\n")
        for rule, severity in (("pfc_storm", "critical"), ("receiver_congested", "warning")):
            labels = (f'cluster="{CLUSTER}",job="{JOB}",instance="{STORM["instance"]}",'
                      f'device="{STORM["device"]}",port="1",netdev="ens3np0",'
                      f'rule="{rule}",severity="{severity}"')
            samples(f, "roce_finding", labels, 1)
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
                if n == DEAD and name != "up":
                    continue
                labels = f'cluster="{CLUSTER}",job="{JOB}",instance="node{n:04d}:9879"'
                samples(f, name, labels, 0 if n == DEAD else 1)
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


IDENTITY = ("instance", "device", "peer", "peer_device", "system_name", "gpus", "rail")


def finds(result, wanted):
    """Whether a panel's result points at one of the `wanted` culprits
    (label dicts): the series with the largest value carries one's
    identifying labels (those of IDENTITY the result has); a count without
    them is at least 1."""
    if not result:
        return False, "no data"

    def is_culprit(labels):
        keys = [k for k in IDENTITY if k in labels]
        return any(all(labels[k] == c[k] for k in keys if k in c)
                   and any(k in c for k in keys) for c in wanted)

    top = max(result, key=lambda s: float(s["value"][1]))
    labels, value = top["metric"], float(top["value"][1])
    if any(k in labels for k in IDENTITY):
        where = " ".join(labels[k] for k in IDENTITY if k in labels)
        if all(is_culprit(s["metric"]) for s in result):
            return True, f"only {where} and its likes ({len(result)} series) = {value:g}"
        if not is_culprit(labels) or value <= 0:
            return False, f"top series is {labels} = {value}"
        return True, f"top {where} = {value:g} of {len(result)} series"
    return value >= 1, f"value {value:g}"


def active_alerts(prom):
    """{alert name: [labels]} of the RocePeerProbe* and RoceLldp* alerts
    pending or firing."""
    out = {}
    result, _ = query(prom, 'ALERTS{alertname=~"RocePeerProbe.+|RoceLldp.+"}')
    for s in result:
        labels = dict(s["metric"])
        name = labels.pop("alertname")
        out.setdefault(name, []).append(
            {k: v for k, v in labels.items() if k in IDENTITY or k == "port"})
    return out
