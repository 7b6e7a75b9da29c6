// Validates the prometheus-operator objects of packaging/kubernetes
// and of the Helm chart (ServiceMonitor, PodMonitor, PrometheusRule) against the JSON schemas that the npm
// package @kubernetes-models/prometheus-operator generates from the
// operator's published CRDs; kubernetes-validate knows only built-in kinds.
// Input: a JSON array of every document of the manifests (stdin), as
// .ci/packaging.sh converts them with kubernetes-validate's PyYAML.
// Before judging the real objects it checks that the validator rejects a
// broken rule and a broken endpoint, so a validator that accepts anything
// fails here instead of passing silently.
import { readFileSync } from "node:fs";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const KINDS = { PodMonitor, PrometheusRule, ServiceMonitor };

function check(doc) {
  const Model = KINDS[doc.kind];
  new Model(doc).validate();
}

function mustReject(what, doc) {
  try {
    check(doc);
  } catch {
    return;
  }
  console.error(`validator accepted ${what}: it checks nothing`);
  process.exit(1);
}

const meta = { name: "x", namespace: "monitoring" };
mustReject("a rule whose expr is a list", {
  apiVersion: "monitoring.coreos.com/v1", kind: "PrometheusRule", metadata: meta,
  spec: { groups: [{ name: "g", rules: [{ alert: "A", expr: ["up"] }] }] },
});
mustReject("a group without a name", {
  apiVersion: "monitoring.coreos.com/v1", kind: "PrometheusRule", metadata: meta,
  spec: { groups: [{ rules: [{ alert: "A", expr: "up" }] }] },
});
mustReject("an endpoint whose interval is not a duration", {
  apiVersion: "monitoring.coreos.com/v1", kind: "ServiceMonitor", metadata: meta,
  spec: { selector: {}, endpoints: [{ port: "metrics", interval: "often" }] },
});

const docs = JSON.parse(readFileSync(0, "utf8"));
let checked = 0;
let failed = 0;
for (const doc of docs) {
  if (!doc || !(doc.kind in KINDS)) continue;
  try {
    check(doc);
    console.log(`ok   ${doc.kind}/${doc.metadata.name}`);
  } catch (e) {
    failed++;
    console.error(`FAIL ${doc.kind}/${doc.metadata?.name}: ${e.message ?? e}`);
  }
  checked++;
}
if (checked === 0) {
  console.error("no ServiceMonitor or PrometheusRule found");
  process.exit(1);
}
console.log(`${checked - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
