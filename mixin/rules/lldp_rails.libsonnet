// Cabling of rail-optimized clusters across the fleet, from the LLDP
// neighbour each RDMA port reports (roce_lldp_neighbor_info, docs/lldp.md),
// without a cabling plan: a node's pod is the switch its first NIC (the
// device whose name ends in a lone 0: mlx5_0, bnxt_re0, rxe0) reaches;
// within a pod, NIC k of every node should reach one switch (rail k's
// leaf). alerts/lldp_rails.libsonnet alerts on these records.
local names = import '../lib/names.libsonnet';
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local p = promql(c),
  local a = {
    s: p.sel(),
    by: p.fleetBy(),
    firstNic: p.sel('device=~".*[^0-9]0"'),
    namedSwitch: p.sel('system_name!=""'),
    pod: names.lldpPod,
    switchPod: names.lldpSwitchPod,
  },

  prometheusRules+:: {
    groups+: [{
      name: 'roce_exporter.fleet.lldp_rails.recording',
      rules: [
        // A first NIC that reports two neighbours (a recabling in progress,
        // a host's LLDP agent beside the switch's) gives its node no pod:
        // one pod per node keeps the joins below one-to-one.
        { record: names.lldpPod, expr: p.expr(|||
          max by (%(by)s, instance, pod) (
            label_replace(
              roce_lldp_neighbor_info%(firstNic)s,
              "pod", "$1", "system_name", "(.+)"
            )
          )
          and on (%(by)s, instance)
          (count by (%(by)s, instance) (roce_lldp_neighbor_info%(firstNic)s) == 1)
        |||, a) },
        { record: names.lldpSwitchPod, expr: p.expr(|||
          max by (%(by)s, instance, device, system_name, pod) (
            roce_lldp_neighbor_info%(namedSwitch)s
            * on (%(by)s, instance) group_left (pod) %(pod)s%(s)s
          )
        |||, a) },
        {
          record: names.lldpNodes,
          expr: 'count by (%(by)s, pod, device, system_name) (%(switchPod)s%(s)s)' % a,
        },
      ],
    }],
  },
}
