#!/usr/bin/env python3
"""Host-side checks of tests/vm/e2e.sh: compares the exporter's scrapes taken
inside the Soft-RoCE VM with what the same kernel reported in the same run
(sysfs text, `rdma statistic show`). Stdlib only.

Input: the folder the guest script (tests/vm/guest/e2e-rdma.sh) filled.
Output: one PASS/FAIL line per check, then exactly "N passed, M failed".
Exit status: 0 when nothing failed, else 1.
"""

import json
import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

DEV, PORT = "rxe0", "1"
# counters that one RC ping-pong of ITERS iterations must move by at least ITERS
ITERS = 500
MOVED = ("sent_pkts", "rcvd_pkts", "rdma_sends", "rdma_recvs")

LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class Report:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, name, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print(f"{'PASS' if ok else 'FAIL'} {name}" + (f"  ({detail})" if detail else ""))
        return ok


def parse_exposition(text):
    """Prometheus text 0.0.4 -> {metric name: [(labels, value)]}; raises
    ValueError on a line that is not a sample, comment or blank."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?\s*$", line)
        if not m:
            raise ValueError(f"line {n}: not a sample: {line!r}")
        labels, rest = {}, m.group(3) or ""
        pos = 0
        while pos < len(rest):
            lm = LABEL_RE.match(rest, pos)
            if not lm:
                raise ValueError(f"line {n}: bad labels: {line!r}")
            labels[lm.group(1)] = re.sub(r'\\[\\"n]', lambda e: UNESCAPE[e.group(0)], lm.group(2))
            pos = lm.end()
        out.setdefault(m.group(1), []).append((labels, float(m.group(4))))
    return out


def select(metrics, name, **want):
    return [(l, v) for l, v in metrics.get(name, []) if all(l.get(k) == w for k, w in want.items())]


def one_value(metrics, name, **want):
    found = select(metrics, name, **want)
    return found[0][1] if len(found) == 1 else None


def parse_rdma_stat(path):
    """`rdma statistic show link rxe0/1`: "link rxe0/1 name value name value ..." """
    try:
        words = path.read_text().split()
    except OSError:
        return {}
    if len(words) < 2 or words[0] != "link" or words[1] != f"{DEV}/{PORT}":
        return {}
    out = {}
    for name, value in zip(words[2::2], words[3::2]):
        if value.isdigit():
            out[name] = int(value)
    return out


def rxe_mapping(reference, source):
    """kernel counter name -> exposed family name for the rxe provider, from the
    binary's own metric reference (`docs metrics`), else from the table's
    source (crates/exposition/src/hw_counters.rs)."""
    text = reference.read_text() if reference and reference.exists() else ""
    rows = re.findall(r"^\|\s*rxe\s*\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|", text, re.M)
    if rows:
        return dict(rows), "metric reference"
    src = source.read_text() if source and source.exists() else ""
    bases = dict(re.findall(r'semantic!\(\s*(\w+),\s*"([^"]+)"', src))
    rows = re.findall(
        r'provider:\s*Provider::Rxe,\s*name:\s*"([^"]+)",\s*family:\s*&(\w+)', src
    )
    return {name: bases[fam] + "_total" for name, fam in rows if fam in bases}, "table source"


def hw_value(metrics, mapping, stat):
    """The exposed value of one kernel hw counter of rxe0/1, or None. A
    mapping may name one series of a family (`name{side="requester"}`)."""
    family = mapping.get(stat)
    if family:
        name, _, labels = family.partition("{")
        extra = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        return one_value(metrics, name, device=DEV, port=PORT, **extra)
    return one_value(metrics, "roce_port_hw_stat_total", device=DEV, port=PORT, stat=stat)


def read_kv(path, sep="="):
    out = {}
    try:
        for line in path.read_text().splitlines():
            k, s, v = line.partition(sep)
            if s:
                out[k.strip()] = v.strip()
    except OSError:
        pass
    return out


def rate_bytes(text):
    """sysfs `rate` ("2.5 Gb/sec (1X SDR)") in bytes per second."""
    m = re.match(r"\s*([0-9.]+)\s*Gb/sec", text)
    return float(m.group(1)) * 1e9 / 8 if m else None


def load_scrape(r, d, name):
    path = d / name
    if not path.exists():
        r.check(False, f"{name} taken", "file missing: see guest-steps.txt and console.log")
        return None
    try:
        metrics = parse_exposition(path.read_text())
    except ValueError as e:
        r.check(False, f"{name} parses as Prometheus text", str(e))
        return None
    r.check(bool(metrics), f"{name} parses as Prometheus text", f"{len(metrics)} metric names")
    return metrics


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--vm-rc", type=int, required=True)
    ap.add_argument("--nic-model", default="virtio-net-pci")
    ap.add_argument("--reference", type=Path)
    ap.add_argument("--table-source", type=Path)
    a = ap.parse_args()
    d = a.dir
    r = Report()

    # ---- the VM and the guest steps
    env = read_kv(d / "env.txt")
    why = {124: "timed out", 125: "boot or harness failure"}.get(a.vm_rc, f"guest status {a.vm_rc}")
    r.check(a.vm_rc not in (124, 125) and "SR_GID0" in env,
            "VM booted with rxe0 and the guest script ran", why)
    steps = (d / "guest-steps.txt").read_text() if (d / "guest-steps.txt").exists() else ""
    gid_index = env.get("SR_GID0", "")
    r.check(gid_index.isdigit(), "VM reports a RoCE v2 IPv4-mapped GID index", f"SR_GID0={gid_index!r}")
    if a.nic_model != "virtio-net-pci":
        want = {"e1000": "e1000", "e1000e": "e1000e"}[a.nic_model]
        r.check(env.get("NIC_DRIVER") == want, f"eth0 is driven by {want}", env.get("NIC_DRIVER", "?"))

    once = (d / "once.txt").read_text() if (d / "once.txt").exists() else ""
    r.check("once rc=0" in steps and f'device="{DEV}"' in once,
            "`roce_exporter once` in the guest prints rxe0",
            next((l for l in steps.splitlines() if l.startswith("once")), "not run"))
    r.check("healthz up=1" in steps, "/healthz answers", (d / "healthz.txt").read_text().strip()[:60]
            if (d / "healthz.txt").exists() else "no answer")
    r.check("pingpong client rc=0 server rc=0" in steps, "ibv_rc_pingpong loopback on rxe0",
            next((l for l in steps.splitlines() if l.startswith("pingpong")), "not run"))

    s1 = load_scrape(r, d, "scrape-1.txt")
    s2 = load_scrape(r, d, "scrape-2.txt")
    s3 = load_scrape(r, d, "scrape-3.txt")
    r.check("exporter alive=1" in steps, "exporter still running after the scrapes")
    r.check("exporter sigterm-exit=0" in steps, "exporter exits 0 on SIGTERM within 5 s",
            next((l for l in steps.splitlines() if "sigterm" in l), "not reached"))

    if s2 is None:
        return finish(r)
    m = s2

    # ---- collector, device, port
    r.check(one_value(m, "roce_collector_success", collector="rdma") == 1,
            'roce_collector_success{collector="rdma"} 1', str(select(m, "roce_collector_success")))
    sysfs = read_kv(d / "sysfs.txt")
    devs = select(m, "roce_device_info", device=DEV)
    r.check(len(devs) == 1 and devs[0][0].get("driver") == "rxe" and devs[0][1] == 1,
            f'roce_device_info{{device="{DEV}",driver="rxe"}} 1', str(devs))
    if devs:
        labels = devs[0][0]
        guid = sysfs.get("node_guid", "")
        norm = lambda g: g.lower().replace(":", "").removeprefix("0x")
        r.check(norm(labels.get("node_guid", "")) == norm(guid) != "",
                "roce_device_info node_guid is the sysfs node_guid", f"{labels.get('node_guid')!r} vs {guid!r}")
        # the netdev's device is the PCI function itself (e1000) or a child of
        # it (virtio-net: .../0000:00:01.0/virtio0): take the last PCI address
        pcis = re.findall(r"/([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])(?=/|$)",
                          env.get("NETDEV_DEVICE", ""))
        pci = pcis[-1] if pcis else "?"
        r.check(labels.get("pci_address") == pci,
                "roce_device_info pci_address is the parent netdev's PCI function",
                f"{labels.get('pci_address')!r} vs {pci!r} ({env.get('NETDEV_DEVICE')})")

    r.check(one_value(m, "roce_port_up", device=DEV, port=PORT) == 1,
            f'roce_port_up{{device="{DEV}",port="{PORT}"}} 1')
    pinfo = select(m, "roce_port_info", device=DEV, port=PORT)
    r.check(len(pinfo) == 1 and pinfo[0][0].get("link_layer") == "Ethernet"
            and pinfo[0][0].get("netdev") == "eth0",
            f'roce_port_info{{device="{DEV}",port="{PORT}",link_layer="Ethernet",netdev="eth0"}} 1', str(pinfo))
    r.check(len(pinfo) == 1 and pinfo[0][0].get("state") == "ACTIVE"
            and pinfo[0][0].get("phys_state") == "LinkUp",
            f'roce_port_info{{device="{DEV}",port="{PORT}",state="ACTIVE",phys_state="LinkUp"}} 1',
            f'{pinfo}; sysfs state {sysfs.get("port.state", "")!r}, phys_state {sysfs.get("port.phys_state", "")!r}')
    want_rate = rate_bytes(sysfs.get("port.rate", ""))
    got_rate = one_value(m, "roce_port_rate_bytes_per_second", device=DEV, port=PORT)
    r.check(want_rate is not None and got_rate == want_rate,
            "roce_port_rate_bytes_per_second matches sysfs rate", f"{got_rate} vs {sysfs.get('port.rate')!r}")

    # ---- GIDs: exactly the populated slots of the kernel's table
    kernel_gids = {}
    for line in ((d / "gids.txt").read_text().splitlines() if (d / "gids.txt").exists() else []):
        k, gid, typ, ndev = (line.split("|") + ["", "", "", ""])[:4]
        kernel_gids[k] = (gid, typ, ndev)
    exposed = {l.get("index"): l for l, v in select(m, "roce_gid_info", device=DEV, port=PORT)}
    r.check(set(exposed) == set(kernel_gids) and kernel_gids != {},
            "roce_gid_info has exactly the populated GID slots",
            f"exposed {sorted(exposed)} vs kernel {sorted(kernel_gids)}")
    for k, (gid, typ, ndev) in sorted(kernel_gids.items(), key=lambda kv: int(kv[0])):
        l = exposed.get(k, {})
        r.check(l.get("gid") == gid and l.get("type") == typ and l.get("netdev") == ndev,
                f"GID {k}: gid={gid} type={typ!r} netdev={ndev}",
                f"exposed {l}" if l != {} else "not exposed")
    if gid_index in kernel_gids:
        l = exposed.get(gid_index, {})
        ip = env.get("SR_IP0", "")
        tail = "".join(f"{int(o):02x}" for o in ip.split(".")) if ip.count(".") == 3 else "?"
        r.check(l.get("type") == "RoCE v2" and l.get("family") == "ipv4_mapped"
                and l.get("gid", "").replace(":", "").endswith("ffff" + tail),
                f"GID {gid_index} (SR_GID0) is the RoCE v2 IPv4-mapped GID of {ip}", str(l))

    # ---- hardware counters, read through netlink
    r.check(one_value(m, "roce_port_info", device=DEV, port=PORT, hw_counters="netlink") == 1,
            f'roce_port_info{{device="{DEV}",port="{PORT}",hw_counters="netlink"}} 1',
            str(select(m, "roce_port_info", device=DEV)))
    # What a sample asks of the kernel: one RDMA netlink request for the
    # port's hw counters, and no hw_counters/ file. A steady sample reads
    # parent, state, phys_state, rate and the watched GID slots (populated
    # ones x 3 files + 4 empty probes); a sample with a full GID scan reads
    # every one of the 1024 slots on top.
    nl = one_value(m, "roce_collector_kernel_requests", collector="rdma", kind="netlink")
    fr = one_value(m, "roce_collector_kernel_requests", collector="rdma", kind="file_read")
    steady = 4 + 3 * len(select(m, "roce_gid_info", device=DEV)) + 4
    r.check(nl == 1, "one RDMA netlink request per port per sample (hw counters, not one read per file)",
            f"netlink={nl}")
    r.check(fr is not None and (fr == steady or fr >= 1024),
            f"a steady sample reads {steady} sysfs files (no hw_counters/ file), a full GID scan >= 1024",
            f"file_read={fr}")
    after = re.search(r"^scrape-2 rc=0 after=(\d+)", steps, re.M)
    stamp = one_value(m, "roce_sample_timestamp_seconds")
    r.check(after is not None and stamp is not None and stamp > int(after.group(1)),
            "scrape-2 holds a sample taken after the traffic",
            f"roce_sample_timestamp_seconds {stamp} vs traffic done before {after.group(1) if after else '?'}")
    mapping, origin = rxe_mapping(a.reference, a.table_source)
    print(f"info: rxe counter mapping from the {origin}: {mapping}")
    lo = parse_rdma_stat(d / "rdma-after-traffic.txt")
    hi = parse_rdma_stat(d / "rdma-after.txt")
    r.check(bool(lo) and bool(hi), "`rdma statistic show` read before and after scrape-2",
            f"{len(lo)} and {len(hi)} counters")
    for stat in sorted(hi):
        got = hw_value(m, mapping, stat)
        where = mapping.get(stat, f'roce_port_hw_stat_total{{stat="{stat}"}}')
        r.check(got is not None and lo.get(stat, -1) <= got <= hi[stat],
                f"{stat}: exposition agrees with rdma statistic",
                f"{where} = {got}, kernel {lo.get(stat)}..{hi[stat]}")
    if s3 is not None:
        # a later sample must tell the same story: catches samples that flap
        bad = [f"{stat}={hw_value(s3, mapping, stat)} (kernel {lo.get(stat)}..{hi[stat]})"
               for stat in sorted(hi)
               if not (hw_value(s3, mapping, stat) is not None
                       and lo.get(stat, -1) <= hw_value(s3, mapping, stat) <= hi[stat])]
        r.check(bool(hi) and not bad and len(select(s3, "roce_device_info", device=DEV)) == 1,
                "scrape-3 (a later sample) shows rxe0 and agrees with rdma statistic too",
                "; ".join(bad[:5]) or f"{len(hi)} counters")
    if s1 is not None:
        r.check(len(select(s1, "roce_device_info", device=DEV)) == 1,
                "scrape-1 (before the traffic) shows rxe0",
                f"{len(s1)} metric names, device_info {select(s1, 'roce_device_info')}")
        mid = parse_rdma_stat(d / "rdma-mid.txt")
        for stat in MOVED:
            before, after = hw_value(s1, mapping, stat), hw_value(m, mapping, stat)
            ok = (before is not None and after is not None and after - before >= ITERS
                  and before <= mid.get(stat, -1))
            r.check(ok, f"{stat} moved by >= {ITERS} with the traffic",
                    f"scrape-1 {before} (kernel then {mid.get(stat)}) -> scrape-2 {after}")

    # ---- the netdev checks the guest ran on the e1000 variant (issue 3): each
    # "ok"/"FAIL" line of tests/vm/guest/e2e-netdev.sh is one check here
    if a.nic_model == "e1000":
        nd = d / "netdev-checks.txt"
        lines = nd.read_text(errors="replace").splitlines() if nd.exists() else []
        results = [l for l in lines if l.startswith("ok ") or l.startswith("FAIL ")]
        r.check(bool(results), "netdev checks ran in the guest", f"{len(results)} results in {nd.name}")
        for l in results:
            r.check(l.startswith("ok "), "netdev: " + l.split(None, 1)[1] if " " in l else l)

    # ---- `roce_exporter check` in the guest (issue 6): with jumbo frames the
    # healthy VM has no critical finding and exits 0; at MTU 1500 it reports
    # mtu_below_jumbo on eth0 (critical) and exits 1
    def check_report(name):
        f = d / f"check-{name}.json"
        try:
            return json.loads(f.read_text())
        except (OSError, ValueError) as e:
            return {"error": str(e)}
    rep = check_report("mtu9000")
    crit = [x["rule"] for x in rep.get("findings", []) if x.get("severity") == "critical"]
    r.check("mtu 9000 set=1" in steps and "check mtu9000 rc=0" in steps and not crit and "checklist" in rep,
            "check on the healthy VM (MTU 9000): exit 0, no critical finding",
            f"critical={crit} findings={[x.get('rule') for x in rep.get('findings', [])]} {rep.get('error', '')}")
    rep = check_report("mtu1500")
    mtu = [x for x in rep.get("findings", []) if x.get("rule") == "mtu_below_jumbo"]
    r.check("check mtu1500 rc=1" in steps and len(mtu) == 1 and mtu[0].get("severity") == "critical"
            and mtu[0].get("subject", {}).get("netdev") == "eth0" and "1500" in mtu[0].get("evidence", ""),
            "check at MTU 1500: mtu_below_jumbo on eth0 (critical), exit 1",
            json.dumps(mtu)[:300] or rep.get("error", ""))

    # ---- promtool's own parser and lint, when the host has it (not counted if absent)
    promtool = shutil.which("promtool")
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=(d / "scrape-2.txt").read_bytes(),
                           capture_output=True, timeout=30)
        r.check(p.returncode == 0, "promtool check metrics accepts scrape-2",
                (p.stdout + p.stderr).decode(errors="replace").strip()[:300])
    return finish(r)


def finish(r):
    print(f"{r.passed} passed, {r.failed} failed")
    return 0 if r.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
