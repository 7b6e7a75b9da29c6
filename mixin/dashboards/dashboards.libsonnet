// grafanaDashboards: {file name: dashboard}. Each is a function of
// _config (dashboards/common.libsonnet: variables, selectors, runbook
// links).
{
  local c = $._config,
  grafanaDashboards+:: {
    'roce-overview.json': (import 'overview.libsonnet')(c),
    'roce-congestion.json': (import 'congestion.libsonnet')(c),
    'roce-errors.json': (import 'errors.libsonnet')(c),
    'roce-topology.json': (import 'topology.libsonnet')(c),
    'roce-probes.json': (import 'probes.libsonnet')(c),
    'roce-fleet.json': (import 'fleet.libsonnet')(c),
  },
}
