// The records the fleet comparisons' alerts (alerts/fleet.libsonnet) read:
// lib/comparisons.libsonnet says what each compares.
local comparisons = import '../lib/comparisons.libsonnet';

{
  local x = comparisons($._config),

  prometheusRules+:: {
    groups+: [{
      name: 'roce_exporter.fleet.comparisons',
      interval: '1m',
      rules: [x.sameValueRule(m) for m in x.list + x.drift],
    }],
  },
}
