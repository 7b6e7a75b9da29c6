// The files the project ships, rendered from the mixin: {path under the
// repository: text}. The committed alerts/ and dashboards/ are this at the
// default _config (tests/monitoring/run.py mixin compares them):
//
//   jsonnet -S -m . mixin/render.jsonnet                     # from the repository root
//   jsonnet -S -m out --tla-code 'config={job: "rdma", scrapeIntervalSeconds: 20}' mixin/render.jsonnet
//
// `config`: _config overrides. `forOverride`: a `for:` for every alert
// ('0s': none), for end-to-end tests that cannot wait. `part`: 'all',
// 'alerts' (alerts/ only) or 'dashboards'; with '-data' appended, each file
// as data (its object) instead of text, with '-both' as {text, data}
// (mixin/render.py reads them).
local manifest = import 'lib/manifest.libsonnet';

function(config={}, forOverride=null, part='all')
  local form = if std.endsWith(part, '-data') then 'data'
  else if std.endsWith(part, '-both') then 'both' else 'text';
  local which = if form == 'text' then part else std.substr(part, 0, std.length(part) - 5);
  local as(v, text) = if form == 'data' then v else if form == 'both' then { text: text, data: v }
  else text;
  local yaml(v, header) = as(v, manifest.yaml(v, header));
  local json(v) = as(v, manifest.json(v));
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  local header = |||
    # Rendered from mixin/ (jsonnet, mixin/render.jsonnet) at its default _config:
    # edit the mixin (or the exporter's rule table), then `python3 alerts/generate.py`.
    # Runbook: docs/runbook.md (served by the exporter at /runbook). Metrics: docs/metrics.md.
  |||;
  local override(rule) =
    if forOverride == null then rule
    else { [k]: rule[k] for k in std.objectFields(rule) if k != 'for' }
         + (if forOverride == '0s' then {} else { 'for': forOverride });
  local groups = { [g.name]: g for g in mixin.prometheusRules.groups }
                 + {
                   [g.name]: g { rules: [override(r) for r in g.rules] }
                   for g in mixin.prometheusAlerts.groups
                 };
  // Each rule file: its areas' recording groups, each before the alerts
  // that read it (the operator's PrometheusRule objects and the chart's
  // switches take one file each, so each file holds what its alerts need).
  local files = {
    'roce_exporter.rules.yml': ['roce_exporter.recording', 'roce_exporter.node'],
    'roce_exporter.recording.rules.yml': ['roce_exporter.fleet.recording', 'roce_exporter.joins'],
    'roce_exporter.fleet.rules.yml': [
      'roce_exporter.fleet.comparisons',
      'roce_exporter.fleet',
      'roce_exporter.fleet.peer_probes.recording',
      'roce_exporter.fleet.peer_probes',
      'roce_exporter.fleet.lldp_rails.recording',
      'roce_exporter.fleet.lldp_rails',
    ],
  };
  local placed = std.flattenArrays(std.objectValues(files));
  local unplaced = [n for n in std.objectFields(groups) if !std.member(placed, n)];
  if std.length(unplaced) > 0 then error 'groups in no rule file: ' + std.join(', ', unplaced)
  else (if which == 'dashboards' then {} else {
          ['alerts/' + f]: yaml({ groups: [groups[n] for n in files[f]] }, header)
          for f in std.objectFields(files)
        } + {
          'alerts/alertmanager.inhibit.yml': yaml(
            { inhibit_rules: mixin.alertmanagerInhibitRules },
            header + '# Alertmanager configuration fragment: merge into alertmanager.yml.\n'
          ),
        }) + (if which == 'alerts' then {} else {
                ['dashboards/' + f]: json(mixin.grafanaDashboards[f])
                for f in std.objectFields(mixin.grafanaDashboards)
              })
