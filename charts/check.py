#!/usr/bin/env python3
"""Lints and renders charts/roce-exporter with Helm's own engine (PyPI's
helm-python-sdk, a binding of Helm v4's Go SDK; no helm binary) and checks
what it renders: with the default values and with
charts/roce-exporter/ci/tls-auth-values.yaml (TLS and basic auth, probes,
every monitoring object). Writes, under OUT:

    default.yaml, tls-auth.yaml       the rendered manifests
    default.json, tls-auth.json       the same documents as a JSON array
    rules/<object>.rules.yml          each PrometheusRule's spec, for promtool

.ci/packaging.sh then validates the manifests against the Kubernetes schemas
(kubernetes-validate --strict), the prometheus-operator objects against the
operator's CRD schemas, and the rules with promtool.

    python3 charts/check.py OUT      (in a venv with helm-python-sdk, pyyaml)
"""

import json
import os
import sys

import helm_python as helm
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHART = os.path.join(HERE, "roce-exporter")
RELEASE, NAMESPACE = "roce-exporter", "monitoring"
sys.path.insert(0, os.path.join(ROOT, "alerts"))
sys.dont_write_bytecode = True
import generate as alerts_gen  # noqa: E402  (alerts/generate.py)


def render(chart, values):
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    docs = []
    for name in sorted(out):
        for d in yaml.safe_load_all(out[name]):
            if d:
                docs.append(d)
    return docs


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def container(docs):
    (ds,) = by_kind(docs, "DaemonSet")
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return ds, c


def check_default(docs):
    errors = []
    kinds = sorted({d["kind"] for d in docs})
    if kinds != ["ConfigMap", "DaemonSet", "Service"]:
        errors.append(f"default values render {kinds}, expected the DaemonSet, its "
                      "ConfigMap and Service only")
    ds, c = container(docs)
    spec = ds["spec"]["template"]["spec"]
    if c["securityContext"].get("privileged") or spec["securityContext"].get("runAsUser") != 65534:
        errors.append("the exporter must run unprivileged as 65534")
    paths = [v.get("hostPath", {}).get("path") for v in spec["volumes"]]
    if paths != ["/sys", None]:
        errors.append(f"hostPath volumes {paths}: only /sys")
    if "feature.node.kubernetes.io/rdma.capable" in spec.get("nodeSelector", {}):
        errors.append("the default values must not need Node Feature Discovery")
    (cm,) = by_kind(docs, "ConfigMap")
    config = yaml.safe_load(cm["data"]["roce_exporter.yml"])
    if config.get("probes", {}).get("enabled") is not False:
        errors.append(f"probes must be off by default: {config}")
    return errors


def check_tls_auth(docs, values):
    errors = []
    ds, c = container(docs)
    spec = ds["spec"]["template"]["spec"]
    # the probes reach /dev/infiniband through the RDMA shared device plugin
    res = values["probes"].get("rdmaResource", {}).get("name", "rdma/rdma_shared_device_a")
    if res not in c["resources"].get("limits", {}):
        errors.append(f"probes on: no {res} limit in {c['resources']}")
    if any(v.get("hostPath", {}).get("path", "").startswith("/dev") for v in spec["volumes"]):
        errors.append("probes on: /dev by hostPath instead of the device plugin")
    if c["securityContext"].get("privileged") or c["securityContext"]["capabilities"]["drop"] != ["ALL"]:
        errors.append("probes on: the container must stay unprivileged")
    if "--web.config.file=/etc/roce_exporter/web/web-config.yml" not in c["args"]:
        errors.append("webConfig on: no --web.config.file")
    (cm,) = [d for d in by_kind(docs, "ConfigMap") if "roce_exporter.yml" in d["data"]]
    config = yaml.safe_load(cm["data"]["roce_exporter.yml"])
    if config["probes"]["enabled"] != "auto" or not config["peer_probes"]["enabled"]:
        errors.append(f"probes and peer probes on: config {config}")
    (secret,) = by_kind(docs, "Secret")
    web = yaml.safe_load(secret["stringData"]["web-config.yml"])
    if web != values["webConfig"]["config"]:
        errors.append("the web config Secret is not webConfig.config")
    for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        (m,) = by_kind(docs, kind)
        (ep,) = m["spec"][key]
        vals = values["serviceMonitor" if kind == "ServiceMonitor" else "podMonitor"]
        if ep["scheme"] != "https" or ep.get("tlsConfig") != vals["tlsConfig"] \
                or ep.get("basicAuth") != vals["basicAuth"]:
            errors.append(f"{kind}: TLS and basic auth not as the values: {ep}")
        job = [r for r in ep["relabelings"] if r.get("targetLabel") == "job"]
        if not job or job[0]["replacement"] != values["job"]:
            errors.append(f"{kind}: the job label is not {values['job']}")
    rules = by_kind(docs, "PrometheusRule")
    if len(rules) != 3:
        errors.append(f"{len(rules)} PrometheusRules, expected 3 (alerts, fleet, recording)")
    selector = values["prometheusRule"]["selector"]
    base = values["prometheusRule"]["runbookUrlBase"]
    shipped = {r["alert"]: r for _, gs in alerts_gen.groups(alerts_gen.default_params())
               for g in gs for r in g["rules"] if "alert" in r}
    seen = set()
    for pr in rules:
        for g in pr["spec"]["groups"]:
            for r in g["rules"]:
                if 'job="roce_exporter"' in r["expr"] or selector not in r["expr"]:
                    errors.append(f"{r.get('alert') or r.get('record')}: selector not {selector}")
                if "alert" in r:
                    seen.add(r["alert"])
                    url = r["annotations"]["runbook_url"]
                    want = shipped[r["alert"]]["annotations"]["runbook_url"]
                    if url != base + "#" + want.partition("#")[2]:
                        errors.append(f"{r['alert']}: runbook_url {url} is not under {base}")
    if seen != set(shipped):
        errors.append(f"PrometheusRules lack {sorted(set(shipped) - seen)}")
    boards = by_kind(docs, "ConfigMap")
    boards = [b for b in boards if b["metadata"]["labels"].get("grafana_dashboard") == "1"]
    shipped_boards = sorted(n for n in os.listdir(os.path.join(ROOT, "dashboards"))
                            if n.endswith(".json"))
    if sorted(k for b in boards for k in b["data"]) != shipped_boards:
        errors.append(f"dashboard ConfigMaps {[list(b['data']) for b in boards]} are not "
                      f"{shipped_boards}")
    for b in boards:
        for name, text in b["data"].items():
            with open(os.path.join(ROOT, "dashboards", name), encoding="utf-8") as f:
                if json.loads(text) != json.load(f):
                    errors.append(f"dashboard ConfigMap {name} differs from dashboards/{name}")
    return errors


def main(out):
    os.makedirs(os.path.join(out, "rules"), exist_ok=True)
    errors = []
    lint = helm.lint(CHART)
    msgs = [m for m in lint.get("messages", []) if m.get("severity", 0) > 1]
    if lint.get("errors") or msgs:
        errors.append(f"helm lint: {lint}")
    print(f"helm lint ({helm.helm_sdk_version()}): {len(lint.get('messages', []))} "
          f"messages, none above info" if not msgs else "")
    with open(os.path.join(CHART, "ci", "tls-auth-values.yaml"), encoding="utf-8") as f:
        tls_values = yaml.safe_load(f)
    lint = helm.lint(CHART, values=tls_values)
    if lint.get("errors") or [m for m in lint.get("messages", []) if m.get("severity", 0) > 1]:
        errors.append(f"helm lint with tls-auth values: {lint}")
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(tls_values)
        for name, values, check in (("default", {}, lambda d: check_default(d)),
                                    ("tls-auth", tls_values,
                                     lambda d: check_tls_auth(d, tls_values))):
            docs = render(chart, values)
            with open(os.path.join(out, name + ".yaml"), "w", encoding="utf-8") as f:
                yaml.safe_dump_all(docs, f, sort_keys=False)
            with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
                json.dump(docs, f)
            for pr in by_kind(docs, "PrometheusRule"):
                path = os.path.join(out, "rules", f"{name}-{pr['metadata']['name']}.rules.yml")
                with open(path, "w", encoding="utf-8") as f:
                    yaml.safe_dump({"groups": pr["spec"]["groups"]}, f, sort_keys=False)
            found = check(docs)
            print(f"{name}: {len(docs)} objects ({', '.join(sorted({d['kind'] for d in docs}))})"
                  f"{': ' + '; '.join(found) if found else ''}")
            errors += found
    for e in errors:
        print("FAIL", e)
    return 1 if errors else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
