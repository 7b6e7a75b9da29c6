// Alerts of one node: the exporter down or stuck, RDMA devices lost, and
// one alert per rule of the exporter's rule table that can report a
// warning or critical finding (the exporter judges, Prometheus notifies:
// no PromQL here re-implements a rule).
local names = import '../lib/names.libsonnet';
local promql = import '../lib/promql.libsonnet';

// Subject of a finding alert, from the labels roce_finding carries (empty
// ones are dropped by Prometheus and render as nothing).
local subject =
  '{{ if $labels.gpu }}GPU {{ $labels.gpu }} {{ end }}'
  + '{{ if $labels.device }}{{ $labels.device }}{{ if $labels.port }} port '
  + '{{ $labels.port }}{{ end }} {{ end }}'
  + '{{ if $labels.netdev }}({{ $labels.netdev }}) {{ end }}';

{
  local c = $._config,
  local p = promql(c),
  local s = p.sel,
  local on = 'on {{ $labels.instance }}',

  local findingAlert(rule) =
    local where = if std.get(rule, 'config') != null
    then " Thresholds and windows: the exporter's `" + rule.config.section + '`.'
    else '';
    p.alert(
      p.alertName(rule.id),
      'roce_finding' + s('rule="' + rule.id + '", severity=~"' + std.join('|', p.notify) + '"')
      + ' == 1',
      p.findingForRule(rule.id),
      null,
      rule.id + ': ' + subject + 'on {{ $labels.instance }}',
      'roce_exporter on {{ $labels.instance }} reports the {{ $labels.severity }} finding '
      + rule.id + ' for ' + subject + '(it checks that ' + rule.checks + ').' + where
      + ' Evidence, fix and verify command: http://{{ $labels.instance }}/findings, or '
      + '`roce_exporter check` on the node.',
      rule.id,
    ),

  prometheusAlerts+:: {
    groups+: [{
      name: 'roce_exporter.node',
      rules: [
        p.alert(
          'RoceExporterDown',
          'up%s == 0' % s(),
          '5m',
          { severity: 'critical' },
          'roce_exporter {{ $labels.instance }} is down',
          'Prometheus could not scrape roce_exporter on {{ $labels.instance }} '
          + 'for 5 minutes: no RDMA fabric data from this node (its other alerts are '
          + 'inhibited meanwhile).',
          'RoceExporterDown',
          liveInstance=false,
        ),
        p.alert(
          'RoceSampleStale',
          p.expr(|||
            time() - roce_sample_timestamp_seconds%(s)s
              > clamp_min(%(n)s * roce_sample_interval_seconds%(s)s, 30)
          |||, { s: s(), n: p.num(c.staleIntervals) }),
          '5m',
          { severity: 'warning' },
          'roce_exporter serves a stale sample ' + on,
          'The sample served by {{ $labels.instance }} is {{ $value | humanizeDuration }} old, '
          + 'more than ' + p.num(c.staleIntervals) + ' sample intervals: the sampler is stuck '
          + '(a hung sysfs read or netlink request), and its findings are frozen.',
          'RoceSampleStale',
        ),
        p.alert(
          'RoceNicCountDropped',
          p.expr(|||
            %(r)s%(s)s
              < max_over_time(%(r)s%(s)s[%(w)s])
          |||, { r: names.rdmaDevices, s: s(), w: c.nicCountWindow }),
          '0s',
          { severity: 'critical' },
          '{{ $labels.instance }} lost RDMA devices',
          'roce_exporter on {{ $labels.instance }} sees {{ $value }} RDMA device(s), fewer than '
          + 'within the last ' + c.nicCountWindow + ': a NIC fell off the bus or its driver '
          + 'unbound (its series vanished with it).',
          'RoceNicCountDropped',
        ),
      ] + [findingAlert(r) for r in c.ruleTable.rules if p.notifies(r)],
    }],
  },
}
