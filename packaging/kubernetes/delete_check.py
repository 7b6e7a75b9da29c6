#!/usr/bin/env python3
"""Runs `kubectl delete -k` of a kustomization against a stand-in API
server and prints, one per line, the objects kubectl asked it to delete
(`DELETE <path>`); the exit status is kubectl's. The stand-in (stdlib
http.server on loopback) answers discovery for the kinds the manifests use
and 404 to every read, so kubectl deletes exactly what the kustomization
renders and its wait for the deletion ends at once. .ci/packaging.sh runs it
to show that deleting the base leaves the namespace, and that the namespace
component is what deletes one.

    python3 packaging/kubernetes/delete_check.py KUBECTL DIR
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (group, version, [(plural, kind, namespaced)]): what the base, the
# components and the chart create.
KINDS = [
    ("", "v1", [("namespaces", "Namespace", False), ("configmaps", "ConfigMap", True),
                ("services", "Service", True), ("serviceaccounts", "ServiceAccount", True),
                ("secrets", "Secret", True)]),
    ("apps", "v1", [("daemonsets", "DaemonSet", True)]),
    ("monitoring.coreos.com", "v1", [("servicemonitors", "ServiceMonitor", True),
                                     ("podmonitors", "PodMonitor", True),
                                     ("prometheusrules", "PrometheusRule", True)]),
]
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def resource_list(group, version, resources):
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": [{"name": p, "singularName": k.lower(), "namespaced": ns, "kind": k,
                           "verbs": VERBS} for p, k, ns in resources]}


def discovery():
    docs = {"/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
            "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                 "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}}
                for g, v, _ in KINDS if g]},
            "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.0"}}
    for g, v, res in KINDS:
        docs[f"/apis/{g}/{v}" if g else f"/api/{v}"] = resource_list(g, v, res)
    return docs


class Handler(BaseHTTPRequestHandler):
    docs = discovery()
    deleted = []

    def reply(self, code, doc):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = self.path.split("?")[0]
        if path in self.docs:
            self.reply(200, self.docs[path])
        else:
            self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "NotFound", "code": 404, "message": f"{path} not found"})

    def do_DELETE(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.deleted.append(self.path.split("?")[0])
        self.reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def log_message(self, *args):
        pass


def main(kubectl, kustomization):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as home:
        config = os.path.join(home, "kubeconfig")
        with open(config, "w", encoding="utf-8") as f:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                       "clusters": [{"name": "c", "cluster": {
                           "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
                       "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                       "users": [{"name": "u", "user": {}}]}, f)
        r = subprocess.run([kubectl, "--kubeconfig", config, "--cache-dir", os.path.join(home, "cache"),
                            "delete", "-k", kustomization, "--timeout=20s"],
                           capture_output=True, text=True, timeout=120, check=False)
    server.shutdown()
    for path in Handler.deleted:
        print("DELETE", path)
    if r.returncode != 0:
        print(r.stdout + r.stderr, file=sys.stderr)
    return r.returncode


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
