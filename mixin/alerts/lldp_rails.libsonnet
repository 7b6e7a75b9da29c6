// Rail cabling verdicts from each RDMA port's LLDP neighbour
// (rules/lldp_rails.libsonnet records each node's pod and who reaches
// which switch).
local names = import '../lib/names.libsonnet';
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local p = promql(c),
  local a = {
    s: p.sel(),
    by: p.fleetBy(),
    namedPort: p.sel('port_id!=""'),
    pod: names.lldpPod,
    switchPod: names.lldpSwitchPod,
    nodes: names.lldpNodes,
  },
  local critical = { severity: 'critical' },
  local warning = { severity: 'warning' },

  prometheusAlerts+:: {
    groups+: [{
      name: 'roce_exporter.fleet.lldp_rails',
      rules: [
        p.alert(
          'RoceLldpRailOddOneOut',
          p.expr(|||
            (
              %(switchPod)s%(s)s
              * on (%(by)s, pod, device, system_name) group_left ()
              %(nodes)s%(s)s
            )
            < on (%(by)s, pod, device) group_left ()
            max by (%(by)s, pod, device) (%(nodes)s%(s)s)
          |||, a),
          '10m',
          critical,
          "{{ $labels.device }} on {{ $labels.instance }} is cabled to another rail's switch",
          '{{ $labels.device }} on {{ $labels.instance }} reaches {{ $labels.system_name }}, '
          + 'where only {{ $value }} node(s) of pod {{ $labels.pod }} have their '
          + "{{ $labels.device }}; most of the pod's nodes reach another switch: the cable is "
          + "on the wrong rail (or in the wrong leaf), so this GPU's traffic crosses the spine.",
          'RoceLldpRailOddOneOut',
        ),
        p.alert(
          'RoceLldpPodOfOne',
          p.expr(|||
            %(pod)s%(s)s
            and on (%(by)s, pod) (count by (%(by)s, pod) (%(pod)s%(s)s) == 1)
            and on (%(by)s) (count by (%(by)s) (%(pod)s%(s)s) >= 4)
          |||, a),
          '10m',
          warning,
          "The first NIC of {{ $labels.instance }} reaches a switch no other node's first "
          + 'NIC reaches',
          'The first RDMA NIC of {{ $labels.instance }} is cabled to {{ $labels.pod }}, '
          + "which no other node's first NIC reaches: that cable is probably on the wrong "
          + "rail, and the node's other NICs cannot be compared with a pod.",
          'RoceLldpPodOfOne',
        ),
        p.alert(
          'RoceLldpTwoNicsOneSwitchPort',
          p.expr(|||
            count by (%(by)s, instance, system_name, port_id) (
              roce_lldp_neighbor_info%(namedPort)s
            ) > 1
          |||, a),
          '10m',
          critical,
          'Two NICs of {{ $labels.instance }} report the same switch port',
          '{{ $value }} RDMA ports of {{ $labels.instance }} report '
          + '{{ $labels.system_name }} port {{ $labels.port_id }} as their LLDP neighbour: '
          + 'they share a link (a splitter, a hub or a mislabelled breakout), or one of them '
          + "is cabled to the other's port.",
          'RoceLldpTwoNicsOneSwitchPort',
        ),
      ],
    }],
  },
}
