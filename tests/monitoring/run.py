#!/usr/bin/env python3
"""Checks roce_exporter's alerts and dashboards with the real Prometheus tools
(python3, stdlib only; driven by tests/it/monitoring.rs, or by hand).

    python3 tests/monitoring/run.py static
        the shipped alerts/ and dashboards/ are the mixin's rendering (mixin/,
        jsonnet) at its default _config, rules.test.yml is current;
        `promtool check rules` on every rule
        file; `promtool test rules`; dashboard structure (data source
        variable, instance/device variables, a unit on every panel); every
        PromQL expression of the dashboards parses (as recording rules under
        `promtool check rules`); every metric named by a rule or a dashboard
        exists in docs/metrics.md (or in pending-metrics.txt, with a reason,
        or is node_exporter's or dcgm-exporter's in foreign-metrics.txt);
        a runbook section per alert and per rule, every runbook link one
        the exporter serves, none under example.invalid; one alert per rule of
        docs/rules.json, routed on its finding with the finding's severity
        (no PromQL re-implements a rule); alert names without a stutter;
        alerts/README.md and dashboards/README.md list every shipped file;
        every rate()/increase() range at
        least 4x the scrape interval; the promtool cases again with rule
        files rendered for 15 s, 20 s, 30 s and 60 s scrape intervals.
    python3 tests/monitoring/run.py e2e --exporter target/debug/roce_exporter
        the exporter on a copy of examples/demo-gpu-node (1 s samples, replayed
        ethtool statistics), Debian's prometheus (1 s scrapes and rule
        evaluation, the project's rules with `for: 0s`) and
        prometheus-alertmanager with the generated inhibit rules and a
        webhook receiver served here, all on 127.0.0.1; every dashboard
        query must return data (except those in e2e-no-data.txt, with a
        reason); then the replayed PFC counters of ens1np0 grow like a storm
        and RocePfcStorm (the exporter's pfc_storm finding) must reach the
        receiver with the right labels and a runbook_url the exporter
        serves; a link flap on the down port mlx5_7 must be inhibited by
        RocePortDown. Bounded to DEADLINE seconds; every process is
        stopped and the temporary directory removed, also on failure.

    python3 tests/monitoring/run.py mixin
        the mixin as its users take it (Debian's jsonnet): `jsonnet -S -m`
        of mixin/render.jsonnet writes the shipped files byte for byte;
        mixin.libsonnet's prometheusAlerts holds alerts only and
        prometheusRules records only; another _config (job, cluster label,
        a 20 s scrape interval, runbook base, uid prefix) reaches every rule
        and dashboard, and `promtool check rules` passes on its rules.

    python3 tests/monitoring/run.py fleet
        the fleet dashboard and the fleet alerts on a synthetic TSDB of 1,000
        nodes with one storming port and four peer-probe faults (a dead
        node, a black-holed port, a lossy path, a leaf switch down;
        tests/monitoring/fleet.py): every query of the "RoCE / Fleet"
        dashboard must find its culprit, and the peer-probe alerts must name
        exactly the faults; prints each query's time. Bounded to
        FLEET_DEADLINE seconds.

Exit status: 0 pass, 1 fail, 3 a required tool is missing (the Rust test
turns that into a skip outside CI).
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "alerts"))
sys.path.insert(0, os.path.join(ROOT, "mixin"))
sys.path.insert(0, HERE)
import generate as alerts_gen  # noqa: E402  (alerts/generate.py)
import render as mixin  # noqa: E402  (mixin/render.py)

DEADLINE = 150  # seconds for the whole end-to-end run
ALERTMANAGER = "prometheus-alertmanager"  # Debian's name of the binary

# Grafana variables, replaced by values a plain Prometheus accepts.
SUBSTITUTIONS = [
    ("$__rate_interval", "1m"),
    ("$__interval", "15s"),
    ("$__range", "1h"),
    ('"$instance"', '".+"'),
    ('"$device"', '".+"'),
    ('"$cluster"', '".*"'),
    ('"$job"', '".+"'),
]

PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
    "unless", "offset", "bool", "inf", "nan",
}
BUILTIN_METRICS = {"up"}


class Failure(Exception):
    pass


class MissingTool(Exception):
    pass


# Every panel's and query's data source: the dashboards' variable.
DS = {"type": "prometheus", "uid": "${datasource}"}
NOTIFY = ("critical", "warning")
INHIBIT = "alerts/" + alerts_gen.INHIBIT_FILE


def rule_table():
    with open(os.path.join(ROOT, "docs", "rules.json"), encoding="utf-8") as f:
        return json.load(f)


def notifies(rule):
    """Whether a rule can report a warning or critical finding: those
    notify (and have an alert); info findings are for /findings."""
    return any(sev in NOTIFY for sev in rule["severities"])


def mixin_rules(config=None):
    """Every rule of the rule files the mixin renders at `config`."""
    return [r for _, gs in alerts_gen.groups(config or {}) for g in gs for r in g["rules"]]


def runbook_sections():
    """{alert name: its runbook section}: the alerts rendered with the
    runbook template `{section}`."""
    return {r["alert"]: r["annotations"]["runbook_url"]
            for r in mixin_rules({"runbook_url_base": "{section}"}) if "alert" in r}


def tool(name):
    path = shutil.which(name)
    if not path:
        raise MissingTool(f"{name} not found: install Debian's "
                          f"{'prometheus-alertmanager' if 'alertmanager' in name else 'prometheus'}")
    return path


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120, **kw)


# ---------------------------------------------------------------- reference

def reference_metrics():
    """{name: type} from docs/metrics.md."""
    out = {}
    with open(os.path.join(ROOT, "docs", "metrics.md"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\| `(roce_[a-z0-9_]+)` \| (\w+) \|", line)
            if m:
                out[m.group(1)] = m.group(2)
    if not out:
        raise Failure("docs/metrics.md: no metric rows found")
    return out


def listed(path):
    """{key: reason} from a `key  # reason` file; a reason is mandatory."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, sep, reason = line.partition("#")
            if not sep or not reason.strip():
                raise Failure(f"{path}:{n}: every entry needs `# reason`")
            out[key.strip()] = reason.strip()
    return out


def substitute(expr):
    for a, b in SUBSTITUTIONS:
        expr = expr.replace(a, b)
    if "$" in expr:
        raise Failure(f"unknown Grafana variable in: {expr}")
    return expr


def metric_names(expr):
    """Metric names a PromQL expression selects (no full parser: strings,
    label matchers, ranges and grouping clauses are removed first; the
    expression itself was parsed by promtool)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\(?)", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in PROMQL_KEYWORDS:
            continue
        names.add(word)
    return names


def check_names(where, names, reference, pending, recorded, foreign=()):
    errors = []
    for name in sorted(names):
        if name in BUILTIN_METRICS or name in recorded or name in reference or name in foreign:
            continue
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if base != name and reference.get(base) == "histogram":
            continue
        if name in pending or base in pending:
            continue
        errors.append(f"{where}: {name} is not in docs/metrics.md")
    return errors


# ------------------------------------------------------------------- static

def dashboards():
    out = []
    for name in sorted(os.listdir(os.path.join(ROOT, "dashboards"))):
        if name.endswith(".json"):
            with open(os.path.join(ROOT, "dashboards", name), encoding="utf-8") as f:
                out.append((name, json.load(f)))
    return out


def dashboard_queries():
    """[(where, expr as written)] of every target and query variable."""
    out = []
    for name, d in dashboards():
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
                m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q, re.S)
                if not m:
                    raise Failure(f"{name}: variable {v['name']}: unexpected query {q}")
                out.append((f"{d['uid']}/${v['name']}", m.group(1)))
        for p in d["panels"]:
            for t in p.get("targets", []):
                out.append((f"{d['uid']}/{p['title']}/{t['refId']}", t["expr"]))
    return out


def check_generated():
    """The shipped files are the mixin's rendering at its default _config,
    from the rule table of docs/rules.json; rules.test.yml is current."""
    errors = []
    with open(mixin.RULES_JSON, encoding="utf-8") as a, \
            open(mixin.MIXIN_RULES_JSON, encoding="utf-8") as b:
        if a.read() != b.read():
            errors.append("mixin/rules.json differs from docs/rules.json: run "
                          "`python3 mixin/render.py`")
    for path in mixin.stale(mixin.render()):
        errors.append(f"{path} is not the mixin's rendering: run `python3 mixin/render.py`")
    import gen_rule_tests
    errors += compare(os.path.join(HERE, "rules.test.yml"), gen_rule_tests.build(),
                      "tests/monitoring/gen_rule_tests.py")
    return errors


def compare(path, text, generator):
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return []
    except FileNotFoundError:
        pass
    rel = os.path.relpath(path, ROOT)
    return [f"{rel} differs from what {generator} writes: run `python3 {generator}`"]


def check_dashboard_structure():
    errors = []
    for name, d in dashboards():
        names = {v["name"]: v for v in d["templating"]["list"]}
        for var in ("datasource", "cluster", "job", "instance", "device"):
            if var not in names:
                errors.append(f"{name}: no `{var}` template variable")
        if not d["uid"].startswith("roce-") or d["tags"] != ["roce_exporter", "rdma"]:
            errors.append(f"{name}: uid {d['uid']} or tags {d['tags']} not the mixin's")
        # $job and $cluster pick the series (a chart's job, one cluster): no
        # query keeps a fixed job
        for p in d["panels"]:
            for tg in p.get("targets", []):
                e = tg["expr"]
                if re.search(r'\bjob\s*=\s*"', e) or "$job" not in e or '=~"$cluster"' not in e:
                    errors.append(f"{name}: panel {p.get('title')!r} does not follow $job "
                                  "and $cluster")
        inst = names.get("instance", {})
        if name != "roce-fleet.json" and (inst.get("includeAll") or inst.get("current")):
            errors.append(f"{name}: `instance` must default to one instance, not All")
        if names.get("datasource", {}).get("type") != "datasource":
            errors.append(f"{name}: `datasource` is not a data source variable")
        if "__inputs" in d or "__requires" in d:
            errors.append(f"{name}: export with a fixed data source (__inputs)")
        for p in d["panels"]:
            title = f"{name}: panel {p.get('title')!r}"
            unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
            if not unit:
                errors.append(f"{title}: no unit")
            if p.get("datasource") != DS:
                errors.append(f"{title}: data source is not ${{datasource}}")
            if not p.get("targets"):
                errors.append(f"{title}: no query")
            for t in p.get("targets", []):
                if t.get("datasource") != DS:
                    errors.append(f"{title}: query {t['refId']} data source is not ${{datasource}}")
                # rail:, peer: and switch: series aggregate over instances
                # (the fleet dashboard)
                if '$instance' not in t["expr"] and not re.search(
                        r"\b(rail|peer|switch):", t["expr"]):
                    errors.append(f"{title}: query {t['refId']} ignores $instance")
    return errors


def promtool_parse(exprs, tmp):
    """Parses every expression with promtool, one recording rule each."""
    path = os.path.join(tmp, "dashboard-queries.rules.yml")
    rules = [{"record": f"dashboard_query_{i}", "expr": substitute(e)}
             for i, (_, e) in enumerate(exprs)]
    with open(path, "w", encoding="utf-8") as f:
        f.write(alerts_gen.yaml_dump({"groups": [{"name": "dashboards", "rules": rules}]}) + "\n")
    r = run([tool("promtool"), "check", "rules", path])
    if r.returncode == 0:
        return []
    errors = [f"promtool check rules (dashboard queries): {r.stdout.strip()}"]
    # name the failing ones
    for i, (where, e) in enumerate(exprs):
        one = os.path.join(tmp, f"q{i}.yml")
        with open(one, "w", encoding="utf-8") as f:
            f.write(alerts_gen.yaml_dump({"groups": [{"name": "q", "rules": [rules[i]]}]}) + "\n")
        if run([tool("promtool"), "check", "rules", one]).returncode != 0:
            errors.append(f"{where}: does not parse: {e}")
    return errors


def check_runbook_links():
    """Every runbook_url opens a `##` section of docs/runbook.md: at the
    default _config the section the alert's exporter serves
    (http://<instance>/runbook/<section>, or one exporter that is up for an
    alert without a live instance); with a published base, the heading's
    anchor. No shipped or mixin file links under example.invalid."""
    with open(os.path.join(ROOT, "docs", "runbook.md"), encoding="utf-8") as f:
        headings = re.findall(r"^## (.+?)\s*$", f.read(), re.M)
    anchors = {h.lower() for h in headings}
    errors = []
    served = re.compile(r"http://(\{\{ \$labels\.instance \}\}|\{\{ with query `up\{"
                        r'job="roce_exporter"\} == 1` \}\}\{\{ \. \| first \| label "instance" '
                        r"\}\}\{\{ end \}\})/runbook/(\w+)")
    base = "https://runbooks.example.org/roce_exporter/runbook.md"
    for config, form in (({}, "served"), ({"runbook_url_base": base}, "published")):
        for r in mixin_rules(config):
            if "alert" not in r:
                continue
            url = r["annotations"]["runbook_url"]
            if form == "served":
                m = served.fullmatch(url)
                if not m or m.group(2) not in headings:
                    errors.append(f"{r['alert']}: runbook_url {url} is no section the "
                                  "exporter serves")
            else:
                page, _, frag = url.partition("#")
                if page != base or frag not in anchors:
                    errors.append(f"{r['alert']}: runbook_url {url} is no heading of "
                                  "the published docs/runbook.md")
    # The dashboards' runbook links: the header link (the whole runbook),
    # panel links and table cells, each a section the exporter serves (or the
    # row's rule).
    for name, d in dashboards():
        urls = [l["url"] for l in d["links"] if "url" in l]
        urls += [l["url"] for p in d["panels"] for l in p.get("links", [])]
        urls += [l["url"] for p in d["panels"] for o in p["fieldConfig"]["overrides"]
                 for prop in o["properties"] if prop["id"] == "links" for l in prop["value"]]
        runbook = [u for u in urls if "/runbook" in u]
        if not runbook:
            errors.append(f"dashboards/{name}: no runbook link")
        for u in runbook:
            m = re.fullmatch(r"http://\$\{(instance|__data\.fields\.instance)\}/runbook/(.*)", u)
            if not m or m.group(2) not in headings + ["", "${__data.fields.rule}"]:
                errors.append(f"dashboards/{name}: runbook link {u} is no section the "
                              "exporter serves")
    for d in ("alerts", "dashboards", "mixin", os.path.join("mixin", "alerts"),
              os.path.join("mixin", "dashboards"), os.path.join("mixin", "lib")):
        folder = os.path.join(ROOT, d)
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    if "example.invalid" in f.read():
                        errors.append(f"{d}/{name}: a link under example.invalid")
    return errors


def check_consumers():
    """Every recording rule is read by a rule or a dashboard query, and
    every inhibit rule names alerts (and rules with alerts) that exist."""
    rules = mixin_rules()
    inhibit = mixin.data(part="alerts")[INHIBIT]["inhibit_rules"]
    queries = [e for _, e in dashboard_queries()]
    errors = []
    for r in rules:
        name = r.get("record")
        if not name:
            continue
        pattern = re.compile(r"(?<![\w:])" + re.escape(name) + r"(?![\w:])")
        if not any(pattern.search(e) for e in [x["expr"] for x in rules] + queries):
            errors.append(f"recording rule {name}: no rule or dashboard reads it")
    alerts = {r["alert"] for r in rules if "alert" in r}
    alerting_rules = {x["id"] for x in rule_table()["rules"] if notifies(x)}
    for i, inh in enumerate(inhibit):
        for m in inh["source_matchers"] + inh["target_matchers"]:
            label, op, value = re.match(r'(\w+)(=~|!=|=)"(.*)"$', m).groups()
            if op == "!=":
                continue
            names = alerts if label == "alertname" else alerting_rules if label == "rule" else None
            if names is None:
                continue
            full = re.compile(value if op == "=~" else re.escape(value))
            matched = {n for n in names if full.fullmatch(n)}
            if not matched:
                errors.append(f"inhibit rule {i}: {m} matches no alert")
            if op == "=~" and "|" in value:
                for part in value.split("|"):
                    if part not in names:
                        errors.append(f"inhibit rule {i}: {part} has no alert")
    return errors


def check_readmes():
    """alerts/README.md and dashboards/README.md list every shipped file
    of their directory in their file table, and nothing else."""
    errors = []
    for d in ("alerts", "dashboards"):
        with open(os.path.join(ROOT, d, "README.md"), encoding="utf-8") as f:
            text = f.read()
        # the table whose header starts with `| file |`
        table = re.search(r"^\| file \|.*\n((?:\|.*\n)+)", text, re.M)
        listed_files = set(re.findall(r"^\| `([^`]+)` \|", table.group(1) if table else "",
                                      re.M))
        shipped = {n for n in os.listdir(os.path.join(ROOT, d))
                   if not n.startswith(".") and os.path.isfile(os.path.join(ROOT, d, n))}
        for n in sorted(shipped - listed_files):
            errors.append(f"{d}/README.md does not list {n}")
        for n in sorted(listed_files - shipped):
            errors.append(f"{d}/README.md lists {n}, which {d}/ does not have")
    return errors


def check_alert_names():
    """Alert names are `Roce` + CamelCase words, no word twice in a row
    (RoceTcShared, not RoceRoceTcShared), and unique."""
    errors = []
    names = [r["alert"] for r in mixin_rules() if "alert" in r]
    for name in names:
        words = re.findall(r"[A-Z][a-z0-9]*", name)
        if not re.fullmatch(r"Roce([A-Z][a-z0-9]*)+", name):
            errors.append(f"alert {name}: not Roce + CamelCase")
        for a, b in zip(words, words[1:]):
            if a.lower() == b.lower():
                errors.append(f"alert {name}: stutters ({a}{b})")
    for name in sorted({n for n in names if names.count(n) > 1}):
        errors.append(f"alert {name}: defined {names.count(name)} times")
    return errors


def check_runbook():
    with open(os.path.join(ROOT, "docs", "runbook.md"), encoding="utf-8") as f:
        text = f.read()
    sections = set(re.findall(r"^## (\w+)\s*$", text, re.M))
    wanted = set(runbook_sections().values())
    wanted |= {r["id"] for r in rule_table()["rules"]}
    errors = []
    for name in sorted(wanted):
        if name not in sections:
            errors.append(f"docs/runbook.md: no `## {name}` section")
            continue
        body = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("Meaning", "Confirm", "Fix"):
            if f"**{part}" not in body:
                errors.append(f"docs/runbook.md: {name} has no **{part}** part")
    for extra in sorted(sections - wanted):
        errors.append(f"docs/runbook.md: section {extra} has no alert or rule")
    return errors


RANGE_CALL = re.compile(r"\b(rate|irate|increase|delta|idelta|deriv)\(")


def ranges(expr):
    """The range of each rate()-like call of an expression (seconds, or
    None for a Grafana variable)."""
    out = []
    for m in RANGE_CALL.finditer(expr):
        rest = expr[m.end():]
        close = rest.find("]")
        open_ = rest.find("[")
        if open_ < 0 or close < open_:
            continue
        text = rest[open_ + 1:close].split(":")[0]
        if text.startswith("$"):
            out.append((m.group(1), text, None))
            continue
        total = 0
        for n, unit in re.findall(r"(\d+)(ms|[smhdwy])", text):
            total += int(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400,
                               "w": 604800, "y": 31536000}[unit]
        out.append((m.group(1), text, total))
    return out


def check_ranges(scrape):
    """Every rate()/increase() range of the alerts, recording rules and
    dashboards generated for `scrape` is at least 4 scrape intervals: with
    fewer, a window can hold one sample and the rate is empty."""
    errors = []
    exprs = []
    for r in mixin_rules({"scrape_interval": scrape}):
        exprs.append((f"alerts: {r.get('alert') or r.get('record')}", r["expr"]))
    boards = mixin.data({"scrapeIntervalSeconds": scrape}, part="dashboards")
    for name, d in boards.items():
        for p in d["panels"]:
            for tg in p.get("targets", []):
                exprs.append((f"{name}/{p['title']}", tg["expr"]))
    for where, e in exprs:
        for fn, text, secs in ranges(e):
            if secs is None or secs < 4 * scrape:
                errors.append(f"{where}: {fn}(...[{text}]) at a {scrape} s scrape interval: "
                              f"the range must be at least {4 * scrape} s")
    return errors


def check_rule_table():
    """The alerts follow the exporter's rule table: one alert per rule,
    selecting its finding and taking the finding's severity; no alert
    re-implements a rule in PromQL over the exporter's counters."""
    errors = []
    alerts = [r for r in mixin_rules() if "alert" in r]
    sections = runbook_sections()
    for rule in rule_table()["rules"]:
        rid = rule["id"]
        routed = [a for a in alerts if f'rule="{rid}"' in a["expr"]]
        if not notifies(rule):
            # info findings only: for /findings, check and dashboards
            if routed:
                errors.append(f"rule {rid}: reports info findings only, yet {len(routed)} alerts route on it")
            continue
        if len(routed) != 1:
            errors.append(f"rule {rid}: {len(routed)} alerts route on its finding, expected 1")
            continue
        a = routed[0]
        if "severity" in a.get("labels", {}):
            errors.append(f"{a['alert']}: sets severity; it must be the finding's "
                          f"({rule['severities']})")
        if sections.get(a["alert"]) != rid:
            errors.append(f"{a['alert']}: runbook_url does not point at the {rid} section")
    for a in alerts:
        if RANGE_CALL.search(a["expr"]):
            errors.append(f"{a['alert']}: rate-like PromQL in an alert: thresholds over counters "
                          "belong to the exporter's rules (route on roce_finding)")
    return errors


def alertmanager_config(receiver_url, inhibit_text):
    """An alertmanager.yml routing everything to one webhook, with the
    generated inhibit rules."""
    inhibit = "\n".join(line for line in inhibit_text.splitlines() if not line.startswith("#"))
    return f"""route:
  receiver: test
  group_by: [alertname, instance, rule, device, port, netdev]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs: [{{url: "{receiver_url}", send_resolved: false}}]
{inhibit}
"""


def check_inhibit_config():
    """`amtool check-config` accepts the generated inhibit rules."""
    amtool = shutil.which("amtool")
    if not amtool:
        raise MissingTool("amtool not found: install Debian's prometheus-alertmanager")
    with tempfile.TemporaryDirectory(prefix="roce-monitoring-am-") as tmp:
        path = os.path.join(tmp, "alertmanager.yml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(alertmanager_config("http://127.0.0.1:9/hook", mixin.render(part="alerts")[INHIBIT]))
        r = run([amtool, "check-config", path])
        if r.returncode != 0:
            return [f"amtool check-config with alerts/{alerts_gen.INHIBIT_FILE}: {r.stdout}"]
    return []


# The scrape interval the shipped files are rendered for (the mixin's
# default _config, gen_rule_tests.build()'s default).
DEFAULT_SCRAPE = 60


def promtool_intervals(promtool, tmp):
    """The promtool cases at each of gen_rule_tests' scrape intervals, each
    against rule files rendered for that interval."""
    import gen_rule_tests
    errors = []
    for scrape in gen_rule_tests.SCRAPE_INTERVALS:
        if scrape == DEFAULT_SCRAPE:
            # the shipped rules.test.yml against the shipped rule files:
            # tested by static() itself, and kept equal to what build()
            # makes at this interval (check_generated)
            continue
        d = os.path.join(tmp, f"scrape-{scrape}s")
        os.makedirs(d)
        files = []
        for name, text in alerts_gen.render({"scrape_interval": scrape}).items():
            path = os.path.join(d, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            files.append(path)
        test = os.path.join(d, "rules.test.yml")
        with open(test, "w", encoding="utf-8") as f:
            f.write(gen_rule_tests.build(scrape, files))
        r = run([promtool, "test", "rules", test])
        if r.returncode != 0:
            errors.append(f"promtool test rules at a {scrape} s scrape interval failed:\n"
                          + r.stdout.strip())
        else:
            print(f"promtool test rules at a {scrape} s scrape interval: SUCCESS")
    return errors


def static():
    promtool = tool("promtool")
    errors = check_generated()
    rule_files = sorted(os.path.join(ROOT, "alerts", n)
                        for n in os.listdir(os.path.join(ROOT, "alerts"))
                        if n.endswith(".rules.yml"))
    r = run([promtool, "check", "rules", *rule_files])
    print(r.stdout.strip())
    if r.returncode != 0:
        errors.append("promtool check rules failed on alerts/")
    r = run([promtool, "test", "rules", os.path.join(HERE, "rules.test.yml")])
    print(r.stdout.strip())
    if r.returncode != 0:
        errors.append("promtool test rules failed")
    errors += check_dashboard_structure()
    reference = reference_metrics()
    pending = listed(os.path.join(HERE, "pending-metrics.txt"))
    # node_exporter's and dcgm-exporter's, read by the joins with them
    foreign = listed(os.path.join(HERE, "foreign-metrics.txt"))
    for name in pending:
        if name in reference:
            errors.append(f"tests/monitoring/pending-metrics.txt: {name} is in docs/metrics.md "
                          "now: remove it from the list")
    rules = mixin_rules()
    recorded = {rule["record"] for rule in rules if "record" in rule}
    for rule in rules:
        where = f"alerts: {rule.get('alert') or rule.get('record')}"
        errors += check_names(where, metric_names(rule["expr"]), reference, pending, recorded,
                              foreign)
    exprs = dashboard_queries()
    with tempfile.TemporaryDirectory(prefix="roce-monitoring-") as tmp:
        errors += promtool_parse(exprs, tmp)
        errors += promtool_intervals(promtool, tmp)
    import gen_rule_tests
    for scrape in gen_rule_tests.SCRAPE_INTERVALS:
        errors += check_ranges(scrape)
    errors += check_rule_table()
    errors += check_inhibit_config()
    for where, e in exprs:
        errors += check_names(where, metric_names(substitute(e)), reference, pending, recorded,
                              foreign)
    errors += check_runbook()
    errors += check_runbook_links()
    errors += check_consumers()
    errors += check_readmes()
    errors += check_alert_names()
    print(f"{len(rules)} rules, {len(exprs)} dashboard queries checked")
    return errors


# ---------------------------------------------------------------------- e2e

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


try:  # looked up here: a forked child must not import (another thread may hold the lock)
    import ctypes
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (ImportError, OSError, AttributeError):
    _PRCTL = None


def die_with_parent():
    """In the child: SIGKILL when this script dies without cleaning up
    (killed by a test harness timeout). Linux prctl(PR_SET_PDEATHSIG = 1)."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGKILL))


class Stack:
    """The processes and files of one end-to-end run."""

    def __init__(self, exporter, deadline):
        self.exporter = exporter
        self.deadline = deadline
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix="roce-monitoring-e2e-")
        self.received = []
        self.lock = threading.Lock()
        self.server = None
        self.stop = threading.Event()

    def left(self):
        return self.deadline - time.monotonic()

    def start(self, name, cmd):
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp,
                             start_new_session=True, preexec_fn=die_with_parent)
        self.procs.append((name, p, log))
        return p

    def log_tail(self, name, n=30):
        try:
            with open(os.path.join(self.tmp, f"{name}.log"), encoding="utf-8",
                      errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def wait_for(self, what, probe, timeout):
        end = min(time.monotonic() + timeout, self.deadline)
        last = None
        while time.monotonic() < end:
            for name, p, _ in self.procs:
                if p.poll() is not None:
                    raise Failure(f"{name} exited ({p.returncode}) while waiting for {what}:\n"
                                  + self.log_tail(name))
            try:
                value = probe()
                if value:
                    return value
            except Exception as e:  # noqa: BLE001 (a probe of a starting process)
                last = e
            time.sleep(0.25)
        raise Failure(f"timed out waiting for {what} (last error: {last})")

    def close(self):
        self.stop.set()
        for name, p, log in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name, p, log in reversed(self.procs):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
            log.close()
        if self.server:
            self.server.shutdown()
            self.server.server_close()
        if os.environ.get("ROCE_MONITORING_KEEP"):
            print(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def webhook(self, port):
        stack = self

        class Hook(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    payload = json.loads(body)
                except ValueError:
                    payload = {"unparsable": body.decode(errors="replace")}
                with stack.lock:
                    stack.received.append(payload)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Hook)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts_received(self, name):
        with self.lock:
            return [a for payload in self.received for a in payload.get("alerts", [])
                    if a.get("labels", {}).get("alertname") == name]


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def bump(text, counter, by):
    pattern = re.compile(r"^(\s*" + re.escape(counter) + r": )(\d+)$", re.M)
    m = pattern.search(text)
    if not m:
        raise Failure(f"replay file has no {counter}")
    return pattern.sub(lambda m: m.group(1) + str(int(m.group(2)) + by), text, count=1)


def query(prom, expr):
    url = f"http://{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    answer = json.loads(http_get(url, timeout=5))
    if answer.get("status") != "success":
        raise Failure(f"query failed: {expr}: {answer}")
    return answer["data"]["result"]


def e2e(exporter):
    prometheus = tool("prometheus")
    alertmanager = tool(ALERTMANAGER)
    if not os.access(exporter, os.X_OK):
        raise Failure(f"exporter binary {exporter} is not executable: build it first")
    demo = os.path.join(ROOT, "examples", "demo-gpu-node")
    stack = Stack(exporter, time.monotonic() + DEADLINE)

    def terminated(signum, _frame):
        raise Failure(f"terminated by signal {signum}")

    signal.signal(signal.SIGTERM, terminated)
    try:
        return e2e_run(stack, demo, prometheus, alertmanager)
    finally:
        stack.close()


def e2e_run(stack, demo, prometheus, alertmanager):
    t = stack.tmp
    for part in ("sys", "proc"):
        shutil.copytree(os.path.join(demo, part), os.path.join(t, part), symlinks=True)
    shutil.copytree(os.path.join(demo, "netdev-replay"), os.path.join(t, "replay"))
    shutil.copy(os.path.join(demo, "lldp-neighbors.json"), os.path.join(t, "lldp.json"))
    # One port down: a critical finding (port_down) and RocePortDown exist,
    # so the findings queries have data.
    port7 = os.path.join(t, "sys", "class", "infiniband", "mlx5_7", "ports", "1")
    write_atomic(os.path.join(port7, "state"), "1: DOWN\n")
    write_atomic(os.path.join(port7, "phys_state"), "3: Disabled\n")

    # mlx5 RoCE ECN switches (the demo tree has them all on): on for
    # priority 3 only.
    for role in ("roce_np", "roce_rp"):
        enable = os.path.join(t, "sys", "class", "net", "ens1np0", "ecn", role, "enable")
        os.makedirs(enable, exist_ok=True)
        for prio in range(8):
            write_atomic(os.path.join(enable, str(prio)), "1\n" if prio == 3 else "0\n")

    p_exp, p_prom, p_am, p_hook = free_port(), free_port(), free_port(), free_port()
    exp_addr, prom, am = f"127.0.0.1:{p_exp}", f"127.0.0.1:{p_prom}", f"127.0.0.1:{p_am}"

    with open(os.path.join(t, "roce.yml"), "w") as f:
        f.write(f"sample_interval: 1s\nnetdevs:\n  replay: {os.path.join(t, 'replay')}\n"
                f"lldp:\n  json_file: {os.path.join(t, 'lldp.json')}\n")
    rules_dir = os.path.join(t, "rules")
    # runbook_url: the runbook this exporter serves
    r = run([sys.executable, os.path.join(ROOT, "alerts", "generate.py"),
             "--for-override", "0s", "--out", rules_dir,
             "--runbook-url-base", "http://{instance}/runbook/{section}"])
    if r.returncode != 0:
        raise Failure(f"alerts/generate.py failed: {r.stdout}")
    with open(os.path.join(t, "prometheus.yml"), "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["{rules_dir}/*.rules.yml"]
alerting:
  alertmanagers:
    - static_configs: [{{targets: ["{am}"]}}]
scrape_configs:
  - job_name: roce_exporter
    static_configs: [{{targets: ["{exp_addr}"]}}]
""")
    with open(os.path.join(rules_dir, alerts_gen.INHIBIT_FILE), encoding="utf-8") as f:
        inhibit = f.read()
    with open(os.path.join(t, "alertmanager.yml"), "w") as f:
        f.write(alertmanager_config(f"http://127.0.0.1:{p_hook}/hook", inhibit))
    stack.webhook(p_hook)
    stack.start("exporter", [stack.exporter, "--config.file", os.path.join(t, "roce.yml"),
                             "--path.sysfs", os.path.join(t, "sys"),
                             "--path.procfs", os.path.join(t, "proc"),
                             "--web.listen-address", exp_addr])
    stack.start("alertmanager", [alertmanager, "--config.file", os.path.join(t, "alertmanager.yml"),
                                 "--storage.path", os.path.join(t, "am"),
                                 "--web.listen-address", am, "--cluster.listen-address="])
    stack.start("prometheus", [prometheus, "--config.file", os.path.join(t, "prometheus.yml"),
                               "--storage.tsdb.path", os.path.join(t, "prom"),
                               "--web.listen-address", prom,
                               "--rules.alert.resend-delay=1s"])
    stack.wait_for("the exporter", lambda: "roce_port_up" in http_get(f"http://{exp_addr}/metrics"),
                   30)
    stack.wait_for("alertmanager", lambda: http_get(f"http://{am}/-/ready"), 30)
    stack.wait_for("prometheus", lambda: http_get(f"http://{prom}/-/ready"), 30)
    stack.wait_for("the first scrape", lambda: query(prom, 'up{job="roce_exporter"} == 1'), 30)
    print(f"stack up after {DEADLINE - stack.left():.0f} s")

    # Every dashboard query returns data (rates need two scrapes: retry).
    no_data = listed(os.path.join(HERE, "e2e-no-data.txt"))
    pending = {}
    for where, e in dashboard_queries():
        pending[where] = substitute(e)
    missing = {}
    end = time.monotonic() + 20
    while pending and time.monotonic() < end:
        for where, e in list(pending.items()):
            if query(prom, e):
                del pending[where]
        if pending:
            time.sleep(1)
    errors = []
    for where, e in pending.items():
        if where in no_data:
            missing[where] = no_data[where]
        else:
            errors.append(f"dashboard query without data: {where}: {e}")
    for where in no_data:
        if where not in pending:
            errors.append(f"e2e-no-data.txt: {where} returns data now: remove it from the list")
    answered = len(dashboard_queries()) - len(pending)
    print(f"dashboard queries with data: {answered}; without, as listed: {len(pending)}")

    # Quiet before the storm.
    if stack.alerts_received("RocePfcStorm") or query(prom, 'ALERTS{alertname="RocePfcStorm"}'):
        errors.append("RocePfcStorm fired before the storm")

    # The storm: ens1np0 (mlx5_0 port 1) pauses its peer on priority 3 for
    # 0.9 s of every second, and its storm detector counts once.
    replay = os.path.join(t, "replay", "ens1np0.txt")

    def storm():
        first = True
        while not stack.stop.is_set():
            with open(replay, encoding="utf-8") as f:
                text = f.read()
            text = bump(text, "tx_prio3_pause_duration", 450000)
            text = bump(text, "tx_prio3_pause", 20000)
            if first:
                text = bump(text, "tx_pause_storm_error_events", 1)
                first = False
            write_atomic(replay, text)
            stack.stop.wait(0.5)

    storm_thread = threading.Thread(target=storm, daemon=True)
    storm_thread.start()
    began = time.monotonic()
    alerts = stack.wait_for("RocePfcStorm at the webhook receiver",
                            lambda: stack.alerts_received("RocePfcStorm"),
                            max(5, stack.left() - 10))
    print(f"RocePfcStorm received {time.monotonic() - began:.0f} s after the storm began")
    # The exporter judged (roce_finding{rule="pfc_storm"}); the alert
    # carries the finding's labels and severity.
    expected = {
        "alertname": "RocePfcStorm", "severity": "critical", "job": "roce_exporter",
        "instance": exp_addr, "rule": "pfc_storm", "netdev": "ens1np0", "device": "mlx5_0",
        "port": "1",
    }
    got = [a["labels"] for a in alerts]
    if expected not in got:
        errors.append(f"RocePfcStorm labels: expected {expected}, got {got}")
    for a in alerts:
        if a.get("status") != "firing":
            errors.append(f"RocePfcStorm status {a.get('status')}")
        ann = a.get("annotations", {})
        if "ens1np0" not in ann.get("summary", "") or "pfc_storm" not in ann.get("description", ""):
            errors.append(f"RocePfcStorm annotations do not name the netdev and rule: {ann}")
        url = ann.get("runbook_url", "")
        if url != f"http://{exp_addr}/runbook/pfc_storm":
            errors.append(f"RocePfcStorm runbook_url: {url}")
        else:
            try:
                page = http_get(url)
            except OSError as e:
                page = str(e)
            if not page.startswith("## pfc_storm\n"):
                errors.append(f"runbook_url {url} does not serve the pfc_storm section: {page[:200]}")
    others = stack.wait_for("RocePortDown at the webhook receiver",
                            lambda: stack.alerts_received("RocePortDown"), 15)
    if not any(a["labels"].get("device") == "mlx5_7" for a in others):
        errors.append(f"RocePortDown: expected device mlx5_7, got {[a['labels'] for a in others]}")
    if any(a["labels"].get("device") != "mlx5_7" for a in others):
        errors.append(f"RocePortDown for an up port: {[a['labels'] for a in others]}")

    # The down port mlx5_7 flaps: RoceLinkFlap fires in Prometheus, and the
    # inhibit rules keep it from the receiver while RocePortDown fires.
    downed = os.path.join(port7, "counters", "link_downed")
    # In place, as the kernel updates it: the exporter keeps sysfs files
    # open and rereads them, so a replaced file would go unseen.
    with open(downed, "r+", encoding="utf-8") as f:
        count = int(f.read().strip() or 0)
        f.seek(0)
        f.write(f"{count + 1}\n")
    # mlx5's 64-bit link_down_events_phy is what link_flap reads where the
    # netdev has it (the 8-bit PMA counter saturates); it moves with it.
    replay8 = os.path.join(t, "replay", "ens8np0.txt")
    with open(replay8, encoding="utf-8") as f:
        write_atomic(replay8, bump(f.read(), "link_down_events_phy", 1))

    def suppressed_flap():
        url = f"http://{am}/api/v2/alerts?" + urllib.parse.urlencode(
            {"filter": 'alertname="RoceLinkFlap"', "inhibited": "true"})
        return [a for a in json.loads(http_get(url))
                if a["labels"].get("device") == "mlx5_7"
                and a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"]]

    try:
        stack.wait_for("RoceLinkFlap on mlx5_7 inhibited in Alertmanager", suppressed_flap, 20)
    except Failure as e:
        seen = [a["labels"] for a in json.loads(http_get(f"http://{am}/api/v2/alerts"))]
        raise Failure(f"{e}; Alertmanager holds: {seen}; Prometheus: "
                      f"{query(prom, 'ALERTS')}; the exporter: "
                      f"{http_get(f'http://{exp_addr}/findings')}") from e
    if stack.alerts_received("RoceLinkFlap"):
        errors.append("RoceLinkFlap on the down port reached the receiver: not inhibited")
    if stack.alerts_received("RoceCriticalFinding"):
        errors.append("a catch-all finding alert paged besides the rule's own")
    stack.stop.set()
    storm_thread.join(timeout=5)
    for name in sorted({a["labels"]["alertname"] for p in stack.received
                        for a in p.get("alerts", [])}):
        print(f"received: {name}")
    for where, reason in sorted(missing.items()):
        print(f"no data (listed): {where}: {reason}")
    print(f"e2e took {DEADLINE - stack.left():.0f} s")
    return errors


# --------------------------------------------------------------- fleet proof

FLEET_DEADLINE = 300  # seconds for the whole fleet proof (a bound for a loaded machine, not a timing check)


def fleet_proof():
    """The fleet dashboard on a synthetic 1,000-node TSDB (tests/monitoring/
    fleet.py): every fleet panel's query must find the one storming port."""
    import fleet
    promtool, prometheus = tool("promtool"), tool("prometheus")
    stack = Stack(None, time.monotonic() + FLEET_DEADLINE)
    try:
        t = stack.tmp
        started = time.monotonic()
        data = os.path.join(t, "fleet.om")
        ports = fleet.write_openmetrics(data, int(time.time()))
        db = os.path.join(t, "prom")
        r = run([promtool, "tsdb", "create-blocks-from", "openmetrics", data, db])
        if r.returncode != 0:
            raise Failure("promtool tsdb create-blocks-from openmetrics failed:\n" + r.stdout)
        size = os.path.getsize(data)
        os.remove(data)
        print(f"synthetic TSDB: {fleet.NODES} nodes, {ports} ports, {size >> 20} MiB of "
              f"OpenMetrics, blocks in {time.monotonic() - started:.1f} s")
        rules_dir = os.path.join(t, "rules")
        r = run([sys.executable, os.path.join(ROOT, "alerts", "generate.py"),
                 "--scrape-interval", str(fleet.SCRAPE), "--out", rules_dir])
        if r.returncode != 0:
            raise Failure(f"alerts/generate.py failed: {r.stdout}")
        rules = [os.path.join(rules_dir, name) for name in
                 ("roce_exporter.recording.rules.yml", "roce_exporter.fleet.rules.yml")]
        port = free_port()
        prom = f"127.0.0.1:{port}"
        with open(os.path.join(t, "prometheus.yml"), "w") as f:
            f.write(f"global:\n  evaluation_interval: 2s\nrule_files: {json.dumps(rules)}\n")
        stack.start("prometheus", [prometheus, "--config.file", os.path.join(t, "prometheus.yml"),
                                   "--storage.tsdb.path", db, "--web.listen-address", prom])
        stack.wait_for("prometheus", lambda: http_get(f"http://{prom}/-/ready"), 40)
        stack.wait_for("the recording rules", lambda: query(
            prom, "instance_rule:roce_findings:count") and query(
            prom, "rail:roce_ports_down:count") and query(
            prom, 'ALERTS{alertname="RocePeerProbeSwitchLosesPeers"}'),
            max(stack.left() - 20, 5))
        errors = []
        for where, e in dashboard_queries():
            if not where.startswith("roce-fleet/") or "/$" in where:
                continue
            ok, detail = False, ""
            try:
                result, took = fleet.query(f"http://{prom}", substitute(e))
                ok, detail = fleet.finds(result, fleet.culprits(where))
            except Exception as err:  # noqa: BLE001 (reported as the panel's failure)
                took, detail = 0.0, str(err)
            print(f"{'ok  ' if ok else 'FAIL'} {took * 1000:7.1f} ms  {where}: {detail}")
            if not ok:
                errors.append(f"fleet panel does not find its culprit: {where}: {detail}")
        # The peer-probe alerts name the faults, all of them and nothing else.
        active = fleet.active_alerts(f"http://{prom}")
        for name, want in fleet.expected_peer_alerts().items():
            got = active.pop(name, [])
            key = lambda labels: sorted(labels.items())  # noqa: E731
            missing = [w for w in want if w not in got]
            extra = [g for g in got if g not in want]
            print(f"{'ok  ' if not missing and not extra else 'FAIL'} {name}: "
                  f"{len(got)} active, {len(want)} expected")
            if missing or extra:
                errors.append(f"{name}: missing {sorted(map(key, missing))[:5]}, "
                              f"unexpected {sorted(map(key, extra))[:5]}")
        for name, got in active.items():
            errors.append(f"{name} is active on the synthetic fleet: {got[:5]}")
        # What each rule group costs Prometheus (its last evaluation): the
        # peer-probe verdicts beside the fleet layer of the same run.
        groups = json.loads(http_get(f"http://{prom}/api/v1/rules", timeout=10))
        for g in groups["data"]["groups"]:
            print(f"rule group {g['name']}: {len(g['rules'])} rules, last evaluation "
                  f"{g['evaluationTime'] * 1000:.0f} ms")
        print(f"fleet proof took {time.monotonic() - started:.0f} s")
        return errors
    finally:
        stack.close()


# A _config as a chart or a kube-prometheus user sets it: their job, their
# cluster label, a scrape interval that does not divide a minute, their
# runbook copy, their uid prefix.
CUSTOM = {"job": "rdma-nodes", "clusterLabel": "k8s_cluster", "scrapeIntervalSeconds": 20,
          "runbookURLBase": "https://wiki.example.com/roce/{section}",
          "dashboardUIDPrefix": "gpu-roce-", "dashboardTags": ["gpu", "roce"],
          "peerLossMin": 3, "nodeExporterSelector": 'job="node-exporter"',
          "dcgmExporterSelector": 'job="nvidia-dcgm-exporter"'}


def mixin_check():
    """The mixin as its users take it: the jsonnet CLI renders the shipped
    files byte for byte; mixin.libsonnet splits alerts from records; a
    custom _config reaches every rule and dashboard and passes promtool."""
    jsonnet, promtool = tool("jsonnet"), tool("promtool")
    errors = []
    with tempfile.TemporaryDirectory(prefix="roce-mixin-") as tmp:
        for d in ("alerts", "dashboards"):
            os.makedirs(os.path.join(tmp, d))
        r = run([jsonnet, "-S", "-m", tmp, os.path.join(ROOT, "mixin", "render.jsonnet")])
        if r.returncode != 0:
            return [f"jsonnet -S -m {tmp} mixin/render.jsonnet failed: {r.stdout}"]
        written = [os.path.relpath(line, tmp) for line in r.stdout.split()]
        for path in mixin.stale({p: open(os.path.join(tmp, p), encoding="utf-8").read()
                                 for p in written}):
            errors.append(f"{path}: `jsonnet -S -m . mixin/render.jsonnet` does not write it "
                          "as shipped")
        print(f"jsonnet -S -m: {len(written)} files, as shipped")
        # jsonnetfmt's layout (Debian's jsonnet package has it), as mixins
        # keep: `jsonnetfmt -i` mends a file.
        fmt = shutil.which("jsonnetfmt")
        sources = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(ROOT, "mixin"))
                   for f in fs if f.endswith((".libsonnet", ".jsonnet"))]
        if fmt is None:
            errors.append("jsonnetfmt not found (Debian's jsonnet package has it)")
        for path in sorted(sources) if fmt else []:
            if run([fmt, "--test", path]).returncode != 0:
                errors.append(f"{os.path.relpath(path, ROOT)}: not as jsonnetfmt lays it out: "
                              "run `jsonnetfmt -i` on it")

        # The library, vendored alone as jsonnet-bundler vendors it (no
        # import reaches outside mixin/): alerts and records apart, the
        # dashboards shipped.
        vendor = os.path.join(tmp, "vendor")
        shutil.copytree(os.path.join(ROOT, "mixin"), os.path.join(vendor, "roce-exporter-mixin"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        code = ("local m = import 'roce-exporter-mixin/mixin.libsonnet';"
                "{alerts: m.prometheusAlerts, rules: m.prometheusRules,"
                " dashboards: std.objectFields(m.grafanaDashboards)}")
        r = run([jsonnet, "-J", vendor, "-e", code], cwd=tmp)
        if r.returncode != 0:
            return errors + [f"jsonnet mixin.libsonnet: {r.stdout}"]
        lib = json.loads(r.stdout)
        for part, key in (("alerts", "alert"), ("rules", "record")):
            for g in lib[part]["groups"]:
                for rule in g["rules"]:
                    if key not in rule:
                        errors.append(f"mixin {part}: group {g['name']} holds "
                                      f"{rule.get('alert') or rule.get('record')}")
        shipped = sorted(n for n, _ in dashboards())
        if lib["dashboards"] != shipped:
            errors.append(f"grafanaDashboards {lib['dashboards']} are not dashboards/ {shipped}")

        # A custom _config, rendered as render.py --config does.
        files = mixin.data(CUSTOM)
        texts = mixin.render(CUSTOM)
        rule_files = []
        for path, text in texts.items():
            if path.endswith(".rules.yml"):
                rule_files.append(os.path.join(tmp, "custom-" + os.path.basename(path)))
                with open(rule_files[-1], "w", encoding="utf-8") as f:
                    f.write(text)
            if "example.invalid" in text:
                errors.append(f"{path} at a custom _config: a placeholder link")
        for path, doc in files.items():
            for text in strings(doc):
                if 'job="roce_exporter"' in text or text == "roce_exporter":
                    errors.append(f"{path} at a custom _config: the default job remains: {text}")
        r = run([promtool, "check", "rules", *rule_files])
        if r.returncode != 0:
            errors.append(f"promtool check rules at a custom _config (20 s scrape interval): "
                          f"{r.stdout}")
        else:
            print("promtool check rules at a custom _config (20 s scrape interval): SUCCESS")
        errors += check_custom_config(files)
    return errors


def strings(doc):
    """Every string of a JSON document."""
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for v in doc.values():
            yield from strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from strings(v)


def check_custom_config(files):
    """CUSTOM's job, cluster label, scrape interval, runbook base, uid
    prefix and tags in every rule and dashboard that CUSTOM renders."""
    errors = []
    job = f'job="{CUSTOM["job"]}"'
    cluster = CUSTOM["clusterLabel"]
    for path, doc in files.items():
        if path.endswith(".rules.yml"):
            for g in doc["groups"]:
                for r in g["rules"]:
                    name = r.get("alert") or r.get("record")
                    if job not in r["expr"]:
                        errors.append(f"{path}: {name} does not select {job}")
                    for fn, text, secs in ranges(r["expr"]):
                        if secs != 80:
                            errors.append(f"{path}: {name}: {fn}[{text}], not 4 x 20 s")
                    if "alert" in r:
                        url = r["annotations"]["runbook_url"]
                        if not url.startswith("https://wiki.example.com/roce/"):
                            errors.append(f"{path}: {name}: runbook_url {url}")
                        # fixed durations, two scrapes (findings), one
                        # scrape (the fleet's peer-probe verdicts)
                        if r.get("for") not in (None, "5m", "10m", "15m", "30m", "1h", "40s", "20s"):
                            errors.append(f"{path}: {name}: for {r['for']} at 20 s")
                    if re.search(r"\b(by|on) \(job, instance", r["expr"]):
                        errors.append(f"{path}: {name} groups a fleet without {cluster}")
        elif path.endswith(".json"):
            names = {v["name"]: v for v in doc["templating"]["list"]}
            if not doc["uid"].startswith(CUSTOM["dashboardUIDPrefix"]):
                errors.append(f"{path}: uid {doc['uid']} without the prefix")
            if doc["tags"] != CUSTOM["dashboardTags"]:
                errors.append(f"{path}: tags {doc['tags']}")
            for var in ("datasource", "cluster", "job", "instance"):
                if var not in names:
                    errors.append(f"{path}: no {var} variable")
            if names.get("job", {}).get("current", {}).get("value") != [CUSTOM["job"]]:
                errors.append(f"{path}: the job variable does not start on {CUSTOM['job']}")
            if not names.get("cluster", {}).get("definition", "").endswith(f", {cluster})"):
                errors.append(f"{path}: the cluster variable does not read {cluster}")
            urls = [l["url"] for l in doc["links"] if "url" in l]
            urls += [l["url"] for p in doc["panels"] for l in p.get("links", [])]
            urls += [l["url"] for p in doc["panels"] for o in p["fieldConfig"]["overrides"]
                     for prop in o["properties"] if prop["id"] == "links" for l in prop["value"]]
            runbook = [u for u in urls if "runbook" in u or "wiki" in u]
            if not runbook or any(not u.startswith("https://wiki.example.com/roce/")
                                  for u in runbook):
                errors.append(f"{path}: runbook links {runbook}")
            for p in doc["panels"]:
                for t in p["targets"]:
                    if '$job' not in t["expr"] or f'{cluster}=~"$cluster"' not in t["expr"]:
                        errors.append(f"{path}: {p['title']}: not on $job and $cluster")
    print(f"custom _config: {len(files)} files follow job, {cluster}, 20 s, runbook base, "
          "uid prefix and tags")
    return errors


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("static")
    sub.add_parser("fleet")
    sub.add_parser("mixin")
    e = sub.add_parser("e2e")
    e.add_argument("--exporter", default=os.environ.get(
        "ROCE_EXPORTER", os.path.join(ROOT, "target", "debug", "roce_exporter")))
    args = p.parse_args(argv)
    try:
        if args.cmd == "fleet":
            errors = fleet_proof()
        elif args.cmd == "mixin":
            errors = mixin_check()
        else:
            errors = static() if args.cmd == "static" else e2e(args.exporter)
    except (MissingTool, mixin.JsonnetMissing) as err:
        print(f"SKIP: {err}")
        return 3
    except Failure as err:
        errors = [str(err)]
    for err in errors:
        print(f"FAIL: {err}")
    if not errors:
        print("PASS")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
