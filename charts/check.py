#!/usr/bin/env python3
"""Lints and renders charts/roce-exporter with Helm's own engine (PyPI's
helm-python-sdk, a binding of Helm v4's Go SDK; no helm binary) and checks
what it renders, for three sets of values:

    default                the chart's defaults: node-exporter's defaults
                           (one NoSchedule toleration, no priority class, no
                           CPU limit), a ServiceAccount, prometheus.io/scrape
    default-monitoring     the defaults with the rules and dashboards on: the
                           shipped files, runbook links to each exporter's
                           own /runbook
    tls-auth               ci/tls-auth-values.yaml: TLS, basic auth, probes,
                           every monitoring object, namespaceOverride
    node-exporter-style    ci/node-exporter-style-values.yaml: the keys a
                           prometheus-node-exporter chart user writes
                           (prometheus.monitor.*, serviceAccount,
                           securityContext, tolerations, extraArgs, ...) and
                           a custom job, cluster and cluster label, which
                           every rendered rule and dashboard must select

and that values.schema.json refuses a misspelt key, a key of the chart's
old layout and a wrong type, and accepts every ci/ values file. Writes,
under OUT:

    <name>.yaml, <name>.json    the rendered manifests (YAML; a JSON array)
    rules/<name>-<object>.rules.yml   each PrometheusRule's spec, for promtool

.ci/packaging.sh then validates the manifests against the Kubernetes schemas
(kubernetes-validate --strict), the prometheus-operator objects against the
operator's CRD schemas, and the rules with promtool.

    python3 charts/check.py OUT      (in a venv with helm-python-sdk, pyyaml)
"""

import glob
import json
import os
import re
import sys

import helm_python as helm
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHART = os.path.join(HERE, "roce-exporter")
RELEASE, NAMESPACE = "roce-exporter", "monitoring"
SHIPPED_JOB = 'job="roce_exporter"'


def render(chart, values):
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    docs = []
    for name in sorted(out):
        if name.endswith("NOTES.txt"):
            continue
        for d in yaml.safe_load_all(out[name]):
            if d:
                docs.append(d)
    return docs, next((t for n, t in out.items() if n.endswith("NOTES.txt")), "")


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def container(docs):
    (ds,) = by_kind(docs, "DaemonSet")
    return ds, ds["spec"]["template"]["spec"]["containers"][0]


RULE_FILES = {"rules": "roce_exporter.rules.yml", "fleet": "roce_exporter.fleet.rules.yml",
              "recording": "roce_exporter.recording.rules.yml"}


def shipped_file(name):
    with open(os.path.join(ROOT, "alerts", name), encoding="utf-8") as f:
        return [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]


def shipped_rules():
    """{alert or record name: rule} of the shipped rule files."""
    return {r.get("alert") or r.get("record"): r for f in RULE_FILES.values() for r in shipped_file(f)}


def paired_rules(docs):
    """(rendered rule, shipped rule) of every rule, in order."""
    out = []
    for pr in by_kind(docs, "PrometheusRule"):
        rendered = [r for g in pr["spec"]["groups"] for r in g["rules"]]
        shipped = shipped_file(RULE_FILES[pr["metadata"]["name"].rsplit("-", 1)[1]])
        assert len(rendered) == len(shipped), pr["metadata"]["name"]
        out += zip(rendered, shipped)
    return out


def runbook_sections():
    with open(os.path.join(ROOT, "docs", "runbook.md"), encoding="utf-8") as f:
        return set(re.findall(r"^## (\S+)$", f.read(), re.M))


def shipped_boards():
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "dashboards", "*.json")))


def rendered_rules(docs):
    return [(pr, r) for pr in by_kind(docs, "PrometheusRule")
            for g in pr["spec"]["groups"] for r in g["rules"]]


def rendered_boards(docs):
    return {k: json.loads(v) for b in by_kind(docs, "ConfigMap")
            if b["metadata"]["labels"].get("grafana_dashboard") == "1" for k, v in b["data"].items()}


def exprs(board):
    """Every PromQL text of a dashboard: panel targets and variable queries."""
    out = []

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("expr", "definition") and isinstance(v, str):
                    out.append(v)
                elif k == "query" and isinstance(v, (str, dict)):
                    out.append(v if isinstance(v, str) else v.get("query", ""))
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(board)
    return out


def variables(board):
    return {v["name"]: v for v in board.get("templating", {}).get("list", [])}


def check_runbook_links(docs, url_of_section):
    """Every alert has a runbook_url that url_of_section(alert, section)
    gives, for a section the runbook has."""
    errors, sections = [], runbook_sections()
    shipped = {n: r for n, r in shipped_rules().items() if "alert" in r}
    seen = set()
    for _, r in rendered_rules(docs):
        if "alert" not in r:
            continue
        seen.add(r["alert"])
        url = r["annotations"].get("runbook_url", "")
        want = [(s, url_of_section(r, s)) for s in sections]
        if not any(url == w for _, w in want):
            errors.append(f"{r['alert']}: runbook_url {url!r} is no section of docs/runbook.md "
                          f"in the expected form (e.g. {url_of_section(r, r['alert'])!r})")
    if seen != set(shipped):
        errors.append(f"PrometheusRules lack {sorted(set(shipped) - seen)}")
    return errors


def exporter_runbook(scheme, selector):
    """The chart's default runbook link: the exporter's /runbook/<section>,
    on the alert's instance or, for alerts without one, an exporter that is
    up."""
    any_up = ("{{ with query `up{" + selector + "} == 1` }}{{ . | first | label \"instance\" }}"
              "{{ end }}")

    def url(rule, section):
        live = "{{ $labels.instance }}" in rule["annotations"].get("runbook_url", "")
        inst = "{{ $labels.instance }}" if live else any_up
        return f"{scheme}://{inst}/runbook/{section}"
    return url


def check_default(docs, values, notes):
    errors = []
    kinds = sorted({d["kind"] for d in docs})
    if kinds != ["ConfigMap", "DaemonSet", "Service", "ServiceAccount"]:
        errors.append(f"default values render {kinds}, expected the DaemonSet, its "
                      "ConfigMap, Service and ServiceAccount only")
    ds, c = container(docs)
    spec = ds["spec"]["template"]["spec"]
    if c["securityContext"].get("privileged") or spec["securityContext"].get("runAsUser") != 65534:
        errors.append("the exporter must run unprivileged as 65534")
    paths = [v.get("hostPath", {}).get("path") for v in spec["volumes"]]
    if paths != ["/sys", None]:
        errors.append(f"hostPath volumes {paths}: only /sys")
    if "feature.node.kubernetes.io/rdma.capable" in spec.get("nodeSelector", {}):
        errors.append("the default values must not need Node Feature Discovery")
    # node-exporter's defaults: no blanket toleration, no priority class, no CPU limit
    if spec.get("tolerations") != [{"effect": "NoSchedule", "operator": "Exists"}]:
        errors.append(f"tolerations {spec.get('tolerations')}: node-exporter's default is NoSchedule/Exists")
    if "priorityClassName" in spec:
        errors.append(f"priorityClassName {spec['priorityClassName']} by default")
    if "cpu" in c.get("resources", {}).get("limits", {}):
        errors.append(f"a CPU limit by default: {c['resources']}")
    (sa,) = by_kind(docs, "ServiceAccount")
    if spec["serviceAccountName"] != sa["metadata"]["name"] or spec["automountServiceAccountToken"]:
        errors.append("the pod must run as the chart's ServiceAccount without its token")
    (svc,) = by_kind(docs, "Service")
    if svc["metadata"].get("annotations", {}).get("prometheus.io/scrape") != "true":
        errors.append("the Service lacks prometheus.io/scrape: \"true\"")
    for kind in ("livenessProbe", "readinessProbe"):
        get = c[kind].get("httpGet", {})
        if (get.get("path"), get.get("port"), get.get("scheme")) != ("/healthz", "metrics", "HTTP"):
            errors.append(f"{kind} {c[kind]}: not /healthz over HTTP")
    (cm,) = by_kind(docs, "ConfigMap")
    config = yaml.safe_load(cm["data"]["roce_exporter.yml"])
    if config.get("probes", {}).get("enabled") is not False:
        errors.append(f"probes must be off by default: {config}")
    return errors


def check_default_monitoring(docs, values, notes):
    """The rules and dashboards at the default job: the shipped ones, but
    for runbook_url, which is the runbook each exporter serves."""
    errors = check_runbook_links(docs, exporter_runbook("http", SHIPPED_JOB))
    for r, want in paired_rules(docs):
        want = dict(want)
        if "annotations" in want:
            want["annotations"] = dict(want["annotations"], runbook_url=r["annotations"]["runbook_url"])
        if r != want:
            errors.append(f"{r.get('alert') or r.get('record')}: differs from the shipped rule")
    boards = rendered_boards(docs)
    if sorted(boards) != shipped_boards():
        errors.append(f"dashboard ConfigMaps {sorted(boards)} are not {shipped_boards()}")
    for name, board in boards.items():
        with open(os.path.join(ROOT, "dashboards", name), encoding="utf-8") as f:
            if board != json.load(f):
                errors.append(f"dashboard ConfigMap {name} differs from dashboards/{name}")
    return errors


def check_tls_auth(docs, values, notes):
    errors = []
    ds, c = container(docs)
    spec = ds["spec"]["template"]["spec"]
    wrong_ns = [f"{d['kind']} {d['metadata']['name']}" for d in docs
                if d["metadata"].get("namespace") != values["namespaceOverride"]]
    if wrong_ns:
        errors.append(f"namespaceOverride {values['namespaceOverride']}: not in it: {wrong_ns}")
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
    for kind in ("livenessProbe", "readinessProbe"):
        if c[kind].get("tcpSocket") != {"port": "metrics"} or "httpGet" in c[kind]:
            errors.append(f"basic auth: {kind} must check the socket: {c[kind]}")
    (cm,) = [d for d in by_kind(docs, "ConfigMap") if "roce_exporter.yml" in d["data"]]
    config = yaml.safe_load(cm["data"]["roce_exporter.yml"])
    if config["probes"]["enabled"] != "auto" or not config["peer_probes"]["enabled"]:
        errors.append(f"probes and peer probes on: config {config}")
    (secret,) = by_kind(docs, "Secret")
    web = yaml.safe_load(secret["stringData"]["web-config.yml"])
    if web != values["webConfig"]["config"]:
        errors.append("the web config Secret is not webConfig.config")
    (svc,) = by_kind(docs, "Service")
    if svc["metadata"]["annotations"].get("prometheus.io/scheme") != "https":
        errors.append("TLS on: the Service's prometheus.io/scheme is not https")
    for kind, key, vals in (("ServiceMonitor", "endpoints", values["prometheus"]["monitor"]),
                            ("PodMonitor", "podMetricsEndpoints", values["prometheus"]["podMonitor"])):
        (m,) = by_kind(docs, kind)
        (ep,) = m["spec"][key]
        if ep["scheme"] != "https" or ep.get("tlsConfig") != vals["tlsConfig"] \
                or ep.get("basicAuth") != vals["basicAuth"]:
            errors.append(f"{kind}: TLS and basic auth not as the values: {ep}")
        job = [r for r in ep["relabelings"] if r.get("targetLabel") == "job"]
        if not job or job[0]["replacement"] != values["job"]:
            errors.append(f"{kind}: the job label is not {values['job']}")
    rules = by_kind(docs, "PrometheusRule")
    if len(rules) != 3:
        errors.append(f"{len(rules)} PrometheusRules, expected 3 (alerts, fleet, recording)")
    selector = f'job="{values["job"]}"'
    for _, r in rendered_rules(docs):
        if SHIPPED_JOB in r["expr"] or selector not in r["expr"]:
            errors.append(f"{r.get('alert') or r.get('record')}: selector not {selector}")
    base = values["prometheusRule"]["runbookUrlBase"]

    def wiki(rule, section):
        return base + "#" + re.sub(r"[^\w\- ]", "", section.lower()).replace(" ", "-")
    errors += check_runbook_links(docs, wiki)
    boards = rendered_boards(docs)
    if sorted(boards) != shipped_boards():
        errors.append(f"dashboard ConfigMaps {sorted(boards)} are not {shipped_boards()}")
    return errors


def check_node_exporter_style(docs, values, notes):
    """The node-exporter chart user's values: each knob where it belongs,
    and the custom job and cluster in every rule and dashboard."""
    errors = []
    mon = values["prometheus"]["monitor"]
    for d in docs:
        labels = d["metadata"].get("labels", {})
        # releaseLabel's release, or the object's additionalLabels' over it
        release = RELEASE if d["kind"] not in ("ServiceMonitor", "PrometheusRule") else "kube-prometheus-stack"
        if labels.get("team") != "fabric" or labels.get("release") != release:
            errors.append(f"{d['kind']} {d['metadata']['name']}: no commonLabels/releaseLabel")
    ds, c = container(docs)
    spec = ds["spec"]["template"]["spec"]
    (sa,) = by_kind(docs, "ServiceAccount")
    if sa["metadata"]["name"] != values["serviceAccount"]["name"] or \
            sa["metadata"].get("annotations") != values["serviceAccount"]["annotations"] or \
            spec["serviceAccountName"] != values["serviceAccount"]["name"]:
        errors.append(f"serviceAccount not as the values: {sa}, pod's {spec['serviceAccountName']}")
    want_pod_sc = dict(values["securityContext"], seccompProfile={"type": "RuntimeDefault"})
    if spec["securityContext"] != want_pod_sc:
        errors.append(f"pod securityContext {spec['securityContext']}, values merged: {want_pod_sc}")
    want_c_sc = dict(values["containerSecurityContext"], privileged=False)
    if c["securityContext"] != want_c_sc:
        errors.append(f"container securityContext {c['securityContext']} is not {want_c_sc}")
    if spec["tolerations"] != values["tolerations"]:
        errors.append(f"tolerations {spec['tolerations']} are not the values'")
    if spec.get("priorityClassName") != "system-node-critical":
        errors.append("priorityClassName not set from the values")
    if c["resources"] != {"requests": {"cpu": "20m", "memory": "48Mi"}, "limits": {"memory": "256Mi"}}:
        errors.append(f"a memory-only limit override gives {c['resources']}")
    if c["image"] != "registry.internal.example.com/mirror/roce_exporter:0.1.0":
        errors.append(f"image {c['image']}")
    if [a for a in c["args"] if a in values["extraArgs"]] != values["extraArgs"]:
        errors.append(f"extraArgs not in {c['args']}")
    env = {e["name"]: e for e in c.get("env", [])}
    if env.get("RUST_BACKTRACE", {}).get("value") != "1" or "valueFrom" not in env.get("NODE_NAME", {}):
        errors.append(f"env and extraEnv not in {c.get('env')}")
    lp, rp = c["livenessProbe"], c["readinessProbe"]
    if (lp["periodSeconds"], lp["timeoutSeconds"], lp["httpGet"]["path"]) != (30, 3, "/healthz") \
            or rp["initialDelaySeconds"] != 2 or rp["periodSeconds"] != 10:
        errors.append(f"probe overrides not merged: {lp} {rp}")
    side = spec["containers"][1]
    if side["name"] != "lldpd" or side["securityContext"] != c["securityContext"] or \
            side["image"] != values["sidecars"][0]["image"]:
        errors.append(f"sidecar {side}")
    (svc,) = by_kind(docs, "Service")
    if "clusterIP" in svc["spec"] or svc["metadata"]["labels"].get("monitoring") != "fabric":
        errors.append(f"Service {svc['spec']} {svc['metadata']['labels']}")
    (sm,) = by_kind(docs, "ServiceMonitor")
    s = sm["spec"]
    if sm["metadata"]["namespace"] != mon["namespace"] or s.get("targetLabels") != mon["targetLabels"] \
            or s.get("podTargetLabels") != mon["podTargetLabels"] \
            or s.get("attachMetadata") != {"node": True} or s.get("sampleLimit") != 20000 \
            or "jobLabel" in s or s["endpoints"][0].get("interval") != "30s":
        errors.append(f"ServiceMonitor not as prometheus.monitor: {sm}")
    relabel = {r["targetLabel"]: r.get("replacement") for r in s["endpoints"][0]["relabelings"]}
    if relabel.get("job") != values["job"] or relabel.get(values["clusterLabel"]) != values["cluster"]:
        errors.append(f"ServiceMonitor relabelings {relabel}: job and cluster not set")
    job, cl = values["job"], values["clusterLabel"]
    selector = f'job="{job}", {cl}="{values["cluster"]}"'
    if len(paired_rules(docs)) != sum(len(shipped_file(f)) for f in RULE_FILES.values()):
        errors.append("the rendered rules are not the shipped ones")
    for pr, _ in rendered_rules(docs):
        if pr["metadata"]["namespace"] != values["prometheusRule"]["namespace"]:
            errors.append(f"PrometheusRule {pr['metadata']['name']} not in prometheusRule.namespace")
    for r, orig in paired_rules(docs):
        name = r.get("alert") or r.get("record")
        text = json.dumps(r)
        if "roce_exporter\\\"" in text.replace('job=\\"roce_exporter\\"', "") or SHIPPED_JOB in text:
            errors.append(f"{name}: still selects the shipped job: {r['expr']}")
        if SHIPPED_JOB in orig["expr"] and selector not in r["expr"]:
            errors.append(f"{name}: selector {selector} not in {r['expr']}")
        if re.search(r"[(,]\s*cluster\s*[,)]", r["expr"]):
            errors.append(f"{name}: aggregates by `cluster`, not {cl}: {r['expr']}")
        if re.search(r"[(,]\s*cluster\s*[,)]", orig["expr"]) and cl not in r["expr"]:
            errors.append(f"{name}: {cl} missing where the shipped rule has cluster")
    base = values["prometheusRule"]["runbookUrlBase"]
    errors += check_runbook_links(docs, lambda rule, section: base.replace("{section}", section))
    boards = rendered_boards(docs)
    if sorted(boards) != shipped_boards():
        errors.append(f"dashboard ConfigMaps {sorted(boards)} are not {shipped_boards()}")
    for name, board in boards.items():
        for e in exprs(board):
            for m in re.findall(r'\bjob\s*(=~|!~|!=|=)\s*"([^"]*)"', e):
                if m not in (("=", job), ("=~", "$job")):
                    errors.append(f"{name}: job matcher {m} in {e!r}")
            if re.search(r'[{,(]\s*cluster\s*(=~|!~|!=|=|,|\))', e):
                errors.append(f"{name}: queries the label cluster, not {cl}: {e!r}")
        var = variables(board)
        for vname, want in (("job", job), ("cluster", values["cluster"])):
            if vname in var and var[vname]["current"].get("value") not in (want, [want]):
                errors.append(f"{name}: variable {vname} defaults to {var[vname]['current']}, not {want}")
    for want in (f'job="{job}"', f'{cl}="{values["cluster"]}"', "ServiceMonitor"):
        if want not in notes:
            errors.append(f"NOTES.txt does not say {want}")
    return errors


def check_schema(chart):
    """values.schema.json refuses what the chart does not read."""
    errors = []
    refused = {
        "a misspelt key": {"tolerations": [], "serviceAcount": {"create": False}},
        "a key of the old layout": {"serviceMonitor": {"enabled": True}},
        "a misspelt nested key": {"prometheus": {"monitor": {"enabeld": True}}},
        "a wrong type": {"service": {"port": "9879"}},
        "an unknown log format": {"logFormat": "text"},
    }
    for what, values in refused.items():
        try:
            chart.validate_schema(values)
            errors.append(f"the schema accepts {what}: {values}")
        except helm.HelmValuesError as e:
            print(f"schema refuses {what}: {' '.join(str(e).split())[:160]}")
    try:
        chart.render({"serviceMonitr": {"enabled": True}}, name=RELEASE, namespace=NAMESPACE)
        errors.append("render accepts a misspelt key")
    except (helm.HelmValuesError, helm.HelmRenderError):
        pass
    job_label = {"prometheus": {"monitor": {"enabled": True, "jobLabel": "monitoring"}},
                 "service": {"labels": {"monitoring": "fabric"}}}
    try:
        chart.render(job_label, name=RELEASE, namespace=NAMESPACE)
        errors.append("jobLabel naming a label whose value is not `job` renders")
    except helm.HelmRenderError as e:
        print(f"jobLabel check: {str(e)[:200]}")
    return errors


def main(out):
    os.makedirs(os.path.join(out, "rules"), exist_ok=True)
    errors = []
    sets = [("default", {}, check_default),
            ("default-monitoring", {"prometheusRule": {"enabled": True}, "dashboards": {"enabled": True}},
             check_default_monitoring)]
    for name, check in (("tls-auth", check_tls_auth), ("node-exporter-style", check_node_exporter_style)):
        with open(os.path.join(CHART, "ci", name + "-values.yaml"), encoding="utf-8") as f:
            sets.append((name, yaml.safe_load(f), check))
    for name, values, _ in sets:
        lint = helm.lint(CHART, values=values)
        msgs = [m for m in lint.get("messages", []) if m.get("severity", 0) > 1]
        if lint.get("errors") or msgs:
            errors.append(f"helm lint ({name} values): {lint}")
    print(f"helm lint ({helm.helm_sdk_version()}): no message above info for "
          f"{', '.join(n for n, _, _ in sets)}")
    with helm.Chart.load(CHART) as chart:
        errors += check_schema(chart)
        for name, values, check in sets:
            chart.validate_schema(values)
            docs, notes = render(chart, values)
            with open(os.path.join(out, name + ".yaml"), "w", encoding="utf-8") as f:
                yaml.safe_dump_all(docs, f, sort_keys=False)
            with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
                json.dump(docs, f)
            for pr in by_kind(docs, "PrometheusRule"):
                path = os.path.join(out, "rules", f"{name}-{pr['metadata']['name']}.rules.yml")
                with open(path, "w", encoding="utf-8") as f:
                    yaml.safe_dump({"groups": pr["spec"]["groups"]}, f, sort_keys=False)
            found = check(docs, values, notes)
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
