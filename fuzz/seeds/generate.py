#!/usr/bin/env python3
"""Regenerates the committed seed corpora under fuzz/seeds/<target>/ from the
repository's real data: sysfs values of the fixture trees, PCI config spaces,
ethtool listings and DCB replays, the example configurations, and netlink
replies laid out from the Soft-RoCE captures (rdma statistic show, ethtool
pause, DCB). Run from anywhere: python3 fuzz/seeds/generate.py

Every seed is small; each target gets a few dozen files at most. The working
corpus the fuzzer grows lives in fuzz/corpus/ (git-ignored)."""

import gzip
import hashlib
import json
import os
import random
import re
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
# Each crate keeps its own fixture trees; by name, where each lives.
FIXTURE_DIRS = [FIXTURES] + [os.path.join(ROOT, "crates", c, "tests", "fixtures")
                             for c in ("netdev", "rdma", "topology")]
FIXTURE_TREES = ("ethtool", "nccl", "netdev-mlx5", "pci-", "sys-")
CAPTURES = os.path.normpath(os.path.join(ROOT, "..", "shared", "softroce-vm", "captures"))
MAX_PER_TARGET = 40


class Seeds:
    def __init__(self, target):
        self.dir = os.path.join(HERE, target)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.seen = set()

    def add(self, name, data):
        if isinstance(data, str):
            data = data.encode()
        digest = hashlib.sha1(data).hexdigest()
        if digest in self.seen or len(self.seen) >= MAX_PER_TARGET:
            return
        self.seen.add(digest)
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:60]
        with open(os.path.join(self.dir, safe), "wb") as f:
            f.write(data)


def fixture(name):
    """The fixture tree `name`, in whichever crate keeps it."""
    for base in FIXTURE_DIRS:
        if os.path.isdir(os.path.join(base, name)):
            return os.path.join(base, name)
    raise FileNotFoundError(name)


def fixture_files_named(names):
    """(path, path below its fixture folder) of the files named `names` in
    every fixture tree, ordered by the latter."""
    found = []
    for base in FIXTURE_DIRS:
        for tree in os.listdir(base):
            if not tree.startswith(FIXTURE_TREES):
                continue
            for dirpath, _, filenames in os.walk(os.path.join(base, tree)):
                for n in filenames:
                    if n in names:
                        found.append((os.path.relpath(dirpath, base), n, dirpath))
    for rel, n, dirpath in sorted(found):
        yield os.path.join(dirpath, n), os.path.join(rel, n)


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- sysfs_values: one value per kind the kernel prints, from the fixtures
def sysfs_values():
    s = Seeds("sysfs_values")
    # The quirks: counters without a PMA, an empty fw_ver, 20 digits, an
    # upper-case GID, NVML's PCI address spelling, and a glob/name pair.
    s.add("counter-no-pma", "N/A (no PMA)\n")
    s.add("counter-u64-max", "18446744073709551615\n")
    s.add("counter-overflow", "18446744073709551616\n")
    s.add("gid-upper", "FE80:0000:0000:0000:BA3F:D2FF:FE00:0001\n")
    s.add("pci-nvml", "00000000:17:00.0\n")
    s.add("rate-sdr", "2.5 Gb/sec (1X SDR)\n")
    s.add("glob", "mlx5_*\0mlx5_10")
    kinds = ["state", "phys_state", "rate", "link_layer", "node_type", "lid",
             "numa_node", "current_link_speed", "max_link_width", "vendor",
             "class", "port_rcv_data", "symbol_error", "1", "0"]
    per_kind = {}
    for path, _ in fixture_files_named(set(kinds)):
        if os.path.islink(path):
            continue
        data = read(path)
        if len(data) > 64:
            continue
        kind = os.path.basename(path)
        if os.path.basename(os.path.dirname(path)) == "gids":
            kind = "gid"
        elif os.path.basename(os.path.dirname(path)) == "types":
            kind = "gid_type"
        bucket = per_kind.setdefault(kind, [])
        if data not in bucket and len(bucket) < 2:
            bucket.append(data)
    for kind, values in sorted(per_kind.items()):
        for i, v in enumerate(values):
            s.add(f"{kind}-{i}", v)


# ---- pci_config: config spaces of the PCI fixture trees (64, 256, 4096 bytes)
def pci_config():
    s = Seeds("pci_config")
    by_len = {}
    for path, rel in fixture_files_named({"config"}):
        data = read(path)
        if len(data) > 4096:
            continue
        by_len.setdefault(len(data), []).append((rel, data))
    for length, items in sorted(by_len.items()):
        for rel, data in items:
            rel = rel.split(os.sep)
            if length == 4096 and len(s.seen) >= 30:
                continue
            s.add(f"{rel[0]}-{rel[-2]}-{length}", data)


# ---- replay_text: ethtool -S listings and DCB replay files
def replay_text():
    s = Seeds("replay_text")
    for n in sorted(os.listdir(fixture("ethtool"))):
        if n.endswith(".txt"):
            s.add(f"ethtool-{n}", read(os.path.join(fixture("ethtool"), n)))
    for sub in ["virtio-net", "e1000"]:
        p = os.path.join(CAPTURES, sub, "ethtool-eth0.txt")
        if os.path.exists(p):
            s.add(f"capture-{sub}-ethtool", read(p))
    for d in [os.path.join(fixture("netdev-mlx5"), "replay"),
              os.path.join(ROOT, "examples", "demo-gpu-node", "netdev-replay")]:
        for n in sorted(os.listdir(d)):
            if n.endswith(".dcb") or (n.endswith(".txt") and "ens1" in n):
                s.add(f"{os.path.basename(d)}-{n}", read(os.path.join(d, n)))
    s.add("dcb-pcp-no-app", "pfc: 3,4\ntrust: pcp\n")
    s.add("dcb-empty-trust", "pfc:\ntrust:\n")


# ---- netlink: replies as the kernel lays them out
NLA_F_NESTED = 1 << 15


def nla(kind, payload):
    b = struct.pack("=HH", 4 + len(payload), kind) + payload
    return b + b"\0" * (-len(b) % 4)


def nlmsg(kind, flags, payload, seq=1, pid=0):
    return struct.pack("=IHHII", 16 + len(payload), kind, flags, seq, pid) + payload


def rdma_counters(path):
    """(device, port, [(name, value)]) from `rdma statistic show` output."""
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"link (\S+)/(\d+) (.*)", line.strip())
        if not m:
            continue
        words = m.group(3).split()
        pairs = [(words[i], int(words[i + 1])) for i in range(0, len(words) - 1, 2)
                 if words[i + 1].isdigit()]
        if pairs:
            out.append((m.group(1), int(m.group(2)), pairs))
    return out


def stat_reply(dev_index, name, port, counters, pad):
    entries = b""
    for i, (n, v) in enumerate(counters):
        inner = nla(82, n.encode() + b"\0")
        if pad and i % 2:
            inner += nla(0, b"")
        inner += nla(83, struct.pack("=Q", v))
        entries += nla(81 | NLA_F_NESTED, inner)
    p = nla(1, struct.pack("=I", dev_index)) + nla(2, name.encode() + b"\0")
    p += nla(3, struct.pack("=I", port)) + nla(80 | NLA_F_NESTED, entries)
    return p


def netlink():
    s = Seeds("netlink")
    stat_get = (5 << 10) + 17
    nldev_get = (5 << 10) + 1
    for sub, f in [("virtio-net", "rdma-tool-after.txt"), ("e1000", "rdma-tool-after.txt"),
                   ("e1000", "rdma-tool-idle.txt")]:
        for dev, port, counters in rdma_counters(os.path.join(CAPTURES, sub, f))[:1]:
            payload = stat_reply(0, dev, port, counters, pad=(sub == "e1000"))
            s.add(f"stat-get-{sub}-{f[:-4]}", nlmsg(stat_get, 0, payload))
            s.add(f"stat-get-payload-{sub}-{f[:-4]}", payload)
    # RDMA_NLDEV_CMD_GET dump: two devices, then NLMSG_DONE.
    dump = b""
    for i, name in enumerate(["mlx5_0", "rxe0"]):
        p = nla(1, struct.pack("=I", i)) + nla(2, name.encode() + b"\0") + nla(3, struct.pack("=I", 1))
        dump += nlmsg(nldev_get, 2, p)
    dump += nlmsg(3, 2, struct.pack("=i", 0))
    s.add("nldev-get-dump", dump)
    # NLMSG_ERROR EINVAL with an extended-ack text (capped request).
    req = struct.pack("=IHHII", 32, stat_get, 5, 1, 0)
    s.add("error-einval-extack", nlmsg(2, 0x100 | 0x200,
                                       struct.pack("=i", -22) + req + nla(1, b"unknown device index\0")))
    s.add("error-ack", nlmsg(2, 0x100, struct.pack("=i", 0) + req))
    s.add("done-with-error", nlmsg(3, 0x200, struct.pack("=i", -95) + nla(1, b"no counters\0")))
    # DCB_CMD_IEEE_GET reply: PFC on priority 3, DSCP 26 -> 3 and 48 -> 6,
    # trust table dscp then pcp (net/dcb/dcbnl.c dcbnl_ieee_fill).
    pfc = bytes([8, 1 << 3]) + b"\0" * 134
    apps = nla(1, struct.pack("=BBH", 5, 3, 26)) + nla(1, struct.pack("=BBH", 5, 6, 48))
    trust = nla(2, bytes([5])) + nla(2, bytes([255]))
    ieee = nla(2, pfc) + nla(3, apps) + nla(11, trust)
    body = bytes([0, 21, 0, 0]) + nla(13 | NLA_F_NESTED, ieee)
    s.add("dcb-ieee-get", nlmsg(78, 0, body))
    s.add("dcb-ieee-get-payload", body)
    s.add("dcb-eopnotsupp", nlmsg(2, 0x100, struct.pack("=i", -95) + req))
    # ETHTOOL_MSG_PAUSE_GET_REPLY with ETHTOOL_A_PAUSE_STATS (e1000 shape).
    header = nla(1 | NLA_F_NESTED, nla(1, struct.pack("=I", 2)) + nla(2, b"eth0\0"))
    stats = nla(5 | NLA_F_NESTED, nla(1, b"\0" * 4) + nla(2, struct.pack("=Q", 12))
                + nla(3, struct.pack("=Q", 7)))
    pause = bytes([22, 1, 0, 0]) + header + nla(2, b"\1") + nla(3, b"\1") + stats
    s.add("pause-reply", nlmsg(0x14, 0, pause))
    s.add("pause-reply-payload", pause)
    # genetlink CTRL_CMD_GETFAMILY reply for "ethtool".
    fam = bytes([1, 2, 0, 0]) + nla(2, b"ethtool\0") + nla(1, struct.pack("=H", 0x15))
    s.add("genl-family", nlmsg(0x10, 0, fam))


# ---- config_yaml and web_config
def configs():
    s = Seeds("config_yaml")
    s.add("example", read(os.path.join(ROOT, "examples", "roce_exporter.yml")))
    s.add("demo", read(os.path.join(ROOT, "examples", "demo-gpu-node", "demo.yml")))
    s.add("rules-alone", "rules:\n  retransmissions: {per_second: 50}\n  hold: 2m\n  disabled: [link_flap]\n")
    s.add("probes-web", "probes:\n  enabled: true\n  interval: 30s\n  gid_index: auto\n"
                        "web:\n  max_connections: 8\n  header_read_timeout: 500ms\n  max_request_bytes: 8192\n")
    s.add("sources", "sample_interval: 1m30s\nsources:\n  rdma_netlink: auto\n  ethtool: true\n  dcb: false\n"
                     "devices:\n  include: ['mlx5_*']\n  exclude: [mlx5_1?]\n")
    s.add("expect", "expect: {mtu: 9000, pfc_priority: 3, link_rate_gbps: 400}\n")
    # Every limit at its ceiling (docs/limits.md): the fuzzer steps past it.
    s.add("ceilings", "sample_interval: 1h\nnetdevs: {module_interval: 1day, qos_interval: 1day, phys_interval: 1day}\n"
                      "sources: {netlink_timeout: 30s}\nprobes: {interval: 1h}\n"
                      "peer_probes: {packets_per_second: 50, sample: 16, flow_labels: 256, timeout: 10s, refresh: 1day, fetch_timeout: 1m}\n"
                      "web: {max_requests: 4096, max_connections: 65536, header_read_timeout: 5m, max_request_bytes: 1048576, write_stall_timeout: 5m}\n"
                      "nccl: {interval: 1h, window: 1day, idle_expiry: 7days, max_files: 65536, max_bytes_per_read: 67108864, busbw_min_bytes: 1099511627776}\n"
                      "lldp: {max_frames_per_sample: 65536}\n")
    w = Seeds("web_config")
    hash04 = "$2y$04$N9Rv4oZ8QhVJ0xq3s0dKxeqE6A6bCUVo2yD6gG0rX8eO6gO1Hc1bC"
    w.add("tls", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    w.add("mtls", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                  "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
                  "  min_version: TLS12\n  max_version: TLS13\n")
    w.add("request-cert", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                          "  client_auth_type: RequestClientCert\n")
    w.add("bad-files", "tls_server_config:\n  cert_file: empty.pem\n  key_file: garbage.pem\n")
    w.add("users-headers", f"basic_auth_users:\n  prometheus: '{hash04}'\n"
                           "http_server_config:\n  headers:\n    X-Frame-Options: deny\n  http2: false\n"
                           "\0Basic cHJvbWV0aGV1czpzZWNyZXQ=")
    w.add("empty", "# nothing\n---\n")


# ---- http_request: settings byte, then the request bytes
def http():
    s = Seeds("http_request")
    prom = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
            "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    reqs = {
        "prometheus-scrape": f"GET /metrics HTTP/1.1\r\nHost: node:9879\r\nUser-Agent: Prometheus/2.45.0\r\n"
                             f"Accept: {prom}\r\nAccept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n",
        "curl-metrics": "GET /metrics HTTP/1.1\r\nHost: localhost:9879\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n",
        "head-healthz": "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "landing-1.0": "GET / HTTP/1.0\r\n\r\n",
        "findings-keepalive": "GET /findings HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "post-body": "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        "chunked-body": "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "delete": "DELETE / HTTP/1.1\r\nHost: x\r\n\r\n",
        "not-found": "GET /metrics/../etc/passwd?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
        "auth": "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic cHJvbWV0aGV1czpzZWNyZXQ=\r\n\r\n",
        "auth-wrong": "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic dXNlcjp3cm9uZw==\r\n\r\n",
        "q-values": "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain;q=0.9, application/openmetrics-text;version=2.0.0\r\n"
                    "Accept: application/openmetrics-text; q=\"1\"\r\nAccept-Encoding: x-gzip;q=0, *;q=0.5\r\n\r\n",
        "big-header": "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + "a" * 3000 + "\r\n\r\n",
        "http2-preface": "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "expect-continue": "GET /metrics HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
        "upgrade": "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    }
    for i, (name, r) in enumerate(sorted(reqs.items())):
        settings = i % 16
        if name.startswith("auth"):
            settings = (settings & ~3) | 1
        s.add(name, bytes([settings]) + r.encode())


# ---- targets driven by structured bytes: reproducible pseudo-random seeds
def structured():
    for target, count, size in [("rdma_reader", 24, 160), ("ethtool_stats", 24, 400)]:
        s = Seeds(target)
        rng = random.Random(target)
        for i in range(count):
            s.add(f"random-{i:02}", bytes(rng.getrandbits(8) for _ in range(rng.randint(1, size))))
        # The first byte picks the fixture (rdma_reader) or starts the script:
        # plain tiny inputs too.
        for b in range(5):
            s.add(f"byte-{b}", bytes([b]))


# ---- nccl_parsers: the NCCL fixtures (logs and Inspector output laid out
# from NCCL's format strings), whole and line by line
def nccl():
    s = Seeds("nccl_parsers")
    base = fixture("nccl")
    for sub in ["logs", "inspector"]:
        d = os.path.join(base, sub)
        for n in sorted(os.listdir(d)):
            data = read(os.path.join(d, n))
            s.add(f"{sub}-{n}", data)
            for i, line in enumerate(data.splitlines()):
                s.add(f"{sub}-{n}-line{i}", line + b"\n")
# ---- phys: the recorded FEC, module EEPROM and devlink replies of
# crates/netdev/tests/fixtures/phys (as text and as bytes) and AER files.
def phys_hex_bytes(text):
    out = bytearray()
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("[") or line == "---":
            continue
        out += bytes(int(w, 16) for w in line.split(":", 1)[-1].split())
    return bytes(out)


def phys():
    s = Seeds("phys")
    src = os.path.join(ROOT, "crates", "netdev", "tests", "fixtures", "phys")
    for name in sorted(os.listdir(src)):
        if name.endswith(".py"):
            continue
        text = read(os.path.join(src, name)).decode()
        s.add(name + ".txt", text)
        if name.endswith(".hex"):
            for i, msg in enumerate(text.split("---")):
                s.add("%s-%d.bin" % (name, i), phys_hex_bytes(msg))
        else:
            s.add(name + ".bin", phys_hex_bytes(text))
    s.add("aer-correctable.txt", "RxErr 2\nBadTLP 5\nBadDLLP 1\nRollover 0\nTimeout 0\n"
          "NonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 8\n")
    s.add("aer-fatal.txt", "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\n"
          "UnxCmplt 0\nRxOF 0\nMalfTLP 1\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\n"
          "BlockedTLP 0\nAtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_FATAL 1\n")


# ---- peer_discovery: kind byte, then an HTTP answer, a DNS message (query
# id first), a Prometheus query answer or an endpoints document
def dns_name(name):
    out = b""
    for label in name.strip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def srv_answer(qid, name, targets, flags=0x8180):
    q = dns_name(name)
    head = struct.pack(">HHHHHH", qid, flags, 1, len(targets), 0, 0)
    body = q + struct.pack(">HH", 33, 1)
    for t, port in targets:
        rdata = struct.pack(">HHH", 0, 100, port) + dns_name(t)
        # the owner name as a pointer to the question (offset 12)
        body += struct.pack(">HHHIH", 0xC00C, 33, 1, 30, len(rdata)) + rdata
    return head + body


def peer_discovery():
    s = Seeds("peer_discovery")
    name = "_metrics._tcp.roce-exporter.monitoring.svc.cluster.local"
    doc = json.dumps({"version": 1, "endpoints": [
        {"node": "node-b", "device": "mlx5_0", "device_index": 0, "port": 1,
         "gid": "::ffff:10.0.1.17", "gid_index": 3, "qpn": 1234, "qkey": 1380994353,
         "mtu": 4096, "subnet": "10.0.1.0/24", "rail": "10.0.1.0/24"}]})
    hostile = json.dumps({"version": 1, "endpoints": [
        {"node": "node-b", "device": "mlx5_0", "device_index": 0, "port": 1,
         "gid": g, "gid_index": 3, "qpn": q, "qkey": 1380994353, "mtu": m}
        for g, q, m in [("ff02::1", 17, 4096), ("::", 17, 4096), ("::ffff:127.0.0.1", 17, 4096),
                        ("::ffff:10.0.1.2", 0, 4096), ("::ffff:10.0.1.2", 4294967295, 4096),
                        ("::ffff:10.0.1.2", 17, 0)]]})
    s.add("http-doc", b"\0" + b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
          + f"Content-Length: {len(doc)}\r\n\r\n{doc}".encode())
    chunks = "".join(f"{len(c):x}\r\n{c}\r\n" for c in (doc[:50], doc[50:]))
    s.add("http-chunked", b"\0HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
          + (chunks + "0\r\n\r\n").encode())
    gz = gzip.compress(doc.encode(), mtime=0)
    s.add("http-gzip", b"\0HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"
          + f"Content-Length: {len(gz)}\r\n\r\n".encode() + gz)
    s.add("http-redirect", b"\0HTTP/1.1 302 Found\r\nLocation: http://10.0.0.1/\r\n\r\n")
    s.add("http-hostile", b"\0HTTP/1.0 200 OK\r\n\r\n" + hostile.encode())
    targets = [(f"10-0-0-{i}.roce-exporter.monitoring.svc.cluster.local", 9879) for i in range(1, 6)]
    s.add("dns-srv", b"\1" + struct.pack(">H", 0x1234) + srv_answer(0x1234, name, targets))
    s.add("dns-truncated", b"\1" + struct.pack(">H", 7) + srv_answer(7, name, targets[:1], 0x8380))
    s.add("dns-nxdomain", b"\1" + struct.pack(">H", 9) + srv_answer(9, name, [], 0x8183))
    series = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "roce_peer_probe_endpoint_info", "instance": "10.1.0.7:9879",
                    "job": "roce", "node": "node-b", "device": "mlx5_0", "device_index": "0",
                    "port": "1", "gid": "::ffff:10.0.1.7", "gid_index": "3", "qpn": "4711",
                    "mtu": "4096", "subnet": "10.0.1.0/24", "rail": "10.0.1.0/24"},
         "value": [1700000000.123, "1"]}]}}
    s.add("prom-vector", b"\2" + json.dumps(series).encode())
    s.add("prom-error", b'\2{"status":"error","errorType":"bad_data","error":"parse error"}')
    s.add("prom-labels", b"\2node=node-b,device=mlx5_0,device_index=0,port=1,gid=::ffff:10.0.1.7,gid_index=3,qpn=17,mtu=4096")
    s.add("doc-node-b", b"\3node-b.example.com\n" + doc.encode())
    s.add("doc-hostile", b"\3" + b"10.1.2.3\n" + hostile.encode())


def lldp():
    """LLDP frames and lldpd documents: the ConnectX firmware frame of
    lldpd's test captures, the switch frames of the tests (hex), frames of
    tests/vm/lldp_wire.py (switch ports of a lossless fabric, a shutdown
    frame), and lldpcli's real json0 output with and without neighbours."""
    s = Seeds("lldp")
    fx = os.path.join(ROOT, "crates", "lldp", "tests", "fixtures")
    with open(os.path.join(fx, "connectx-lldpd-tests.pcap"), "rb") as f:
        pcap = f.read()
    pos = 24
    while pos + 16 <= len(pcap):
        incl = struct.unpack_from("<I", pcap, pos + 8)[0]
        frame = pcap[pos + 16:pos + 16 + incl]
        if frame[12:14] == b"\x88\xcc":
            s.add(f"pcap-{pos}", frame)
        pos += 16 + incl
    s.add("switch-pfc4-dscp26", bytes.fromhex(read(os.path.join(
        fx, "switch-pfc4-dscp26.hex")).decode().strip()))
    sys.path.insert(0, os.path.join(ROOT, "tests", "vm"))
    import lldp_wire
    for name, port, pfc, dscp, app, ttl in (("leaf-p1-r0", "swp1", 4, 26, 4, 120),
                                            ("leaf-p1-r1", "swp2", 3, 26, 3, 120),
                                            ("leaf-p1-r0", "swp1", 3, 46, 5, 0)):
        s.add(f"{name}-{port}-ttl{ttl}", lldp_wire.switch_frame(
            "1c:34:da:5a:01:00", port, name, pfc, dscp, app, ttl=ttl))
    for doc in ("lldpcli-json0-neighbors-dcbx.json", "lldpcli-json0-no-neighbors.json"):
        s.add(doc, read(os.path.join(fx, doc)))


def main():
    sysfs_values()
    pci_config()
    replay_text()
    netlink()
    configs()
    http()
    structured()
    nccl()
    phys()
    peer_discovery()
    lldp()
    for t in sorted(os.listdir(HERE)):
        d = os.path.join(HERE, t)
        if os.path.isdir(d):
            n = len(os.listdir(d))
            size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
            print(f"{t}: {n} seeds, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
