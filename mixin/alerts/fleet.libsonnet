// Fleet alerts: ports slower than their peers of the same NIC model, and
// the comparisons (lib/comparisons.libsonnet) that name what deviates:
// firmware, MTU, PFC priorities, QoS settings, GID types.
local comparisons = import '../lib/comparisons.libsonnet';
local names = import '../lib/names.libsonnet';
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local p = promql(c),
  local x = comparisons(c),
  local by = p.fleetBy(),
  local fleet = p.fleetName,
  local warning = { severity: 'warning' },
  local rate = names.activeRateByHcaType + p.sel(),

  prometheusAlerts+:: {
    groups+: [{
      name: 'roce_exporter.fleet',
      interval: '1m',
      rules: [
        p.alert(
          'RoceLinkRateBelowPeers',
          p.expr(|||
            %(rate)s
              < on (%(by)s, hca_type) group_left ()
              max by (%(by)s, hca_type) (%(rate)s)
          |||, { rate: rate, by: by }),
          '15m',
          warning,
          'RDMA port {{ $labels.device }} port {{ $labels.port }} runs below its peers '
          + 'on {{ $labels.instance }}',
          '{{ $labels.device }} port {{ $labels.port }} ({{ $labels.hca_type }}) on '
          + '{{ $labels.instance }} is active at {{ $value | humanize }}B/s, below the fastest '
          + 'active port of the same NIC model in ' + fleet + ': it negotiated a lower speed '
          + 'or fewer lanes.',
          'RoceLinkRateBelowPeers',
        ),
        p.alert(
          'RoceFirmwareDrift',
          x.deviating(x.firmware.record, x.firmware.group),
          '1h',
          warning,
          '{{ $labels.device }} on {{ $labels.instance }} runs firmware '
          + '{{ $labels.fw_version }}, not the most common of its ' + fleet
          + ' peers ({{ $labels.hca_type }})',
          '{{ $labels.device }} ({{ $labels.hca_type }}) on {{ $labels.instance }} runs '
          + 'firmware {{ $labels.fw_version }}, which only {{ $value }} RDMA device(s) of that '
          + 'NIC model and driver in ' + fleet + ' run: it is not the version most of them '
          + 'run (where no version has a majority, every device is named). '
          + x.hint(x.firmware.record),
          'RoceFirmwareDrift',
        ),
        p.alert(
          'RoceMtuInconsistent',
          x.deviating(x.mtu.record, x.mtu.group),
          '30m',
          warning,
          '{{ $labels.netdev }} on {{ $labels.instance }} has MTU {{ $labels.mtu }}, '
          + 'not the most common in ' + fleet,
          'The RoCE netdev {{ $labels.netdev }} ({{ $labels.device }} port '
          + '{{ $labels.port }}) on {{ $labels.instance }} has MTU {{ $labels.mtu }}, which '
          + 'only {{ $value }} RoCE netdev(s) of ' + fleet + ' use: RoCE traffic between it '
          + 'and the others runs at the smallest MTU or is dropped (where no MTU has a '
          + 'majority, every netdev is named). ' + x.hint(x.mtu.record),
          'RoceMtuInconsistent',
        ),
        p.alert(
          'RocePfcPriorityInconsistent',
          x.deviating(x.pfc.record, x.pfc.group),
          '30m',
          warning,
          'PFC priorities of {{ $labels.netdev }} on {{ $labels.instance }} differ '
          + 'from ' + fleet,
          'PFC is on for priorities {{ $labels.pfc }} on {{ $labels.netdev }} '
          + '({{ $labels.device }} port {{ $labels.port }}) on {{ $labels.instance }}, as '
          + 'on only {{ $value }} RoCE netdev(s) of ' + fleet + ': lossless traffic is '
          + 'dropped on a priority where one end has PFC off, and pauses on a priority '
          + 'that should be lossy stall it (where no set has a majority, every netdev is '
          + 'named). ' + x.hint(x.pfc.record),
          'RocePfcPriorityInconsistent',
        ),
        p.alert(
          'RoceQosConfigDrift',
          x.deviating(names.qosDrift, x.qosGroup),
          '1h',
          warning,
          'QoS setting {{ $labels.config }} of {{ $labels.netdev }} on '
          + '{{ $labels.instance }} differs from its peers in ' + fleet,
          'The value of {{ $labels.config }}{{ if $labels.priority }} (priority '
          + '{{ $labels.priority }}){{ end }}{{ if $labels.parameter }} '
          + '({{ $labels.parameter }}){{ end }}{{ if $labels.dscp }} (DSCP '
          + '{{ $labels.dscp }}){{ end }} on {{ $labels.netdev }} ({{ $labels.device }} '
          + 'port {{ $labels.port }}) on {{ $labels.instance }} is shared by only '
          + '{{ $value }} RoCE netdev(s) of ' + fleet + '{{ if $labels.hca_type }} on '
          + "{{ $labels.hca_type }} NICs{{ end }}: this node does not follow the fabric's "
          + 'QoS standard, and its RoCE traffic is classified, scheduled or paused '
          + "differently from its peers' (where no value has a majority, every netdev is "
          + 'named). ' + x.hint(names.qosDrift),
          'RoceQosConfigDrift',
        ),
        p.alert(
          'RoceGidTypeInconsistent',
          x.deviating(x.gid.record, x.gid.group),
          '30m',
          warning,
          'GID index {{ $labels.index }} of {{ $labels.device }} port {{ $labels.port }} '
          + 'on {{ $labels.instance }} differs from ' + fleet,
          'GID index {{ $labels.index }} of {{ $labels.device }} port {{ $labels.port }} '
          + 'on {{ $labels.instance }} is {{ $labels.type }} ({{ $labels.family }}), as on '
          + 'only {{ $value }} RDMA port(s) of ' + fleet + ': a fleet-wide GID index '
          + '(NCCL_IB_GID_INDEX) selects RoCE v1 or a link-local GID on some nodes (where '
          + 'no type has a majority, every port is named). ' + x.hint(x.gid.record),
          'RoceGidTypeInconsistent',
        ),
      ],
    }],
  },
}
