// Recording rules of one node's series that the node alerts and the fleet
// comparisons read.
local names = import '../lib/names.libsonnet';
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local p = promql(c),
  local s = p.sel,
  local by = p.fleetBy(),

  prometheusRules+:: {
    groups+: [{
      name: 'roce_exporter.recording',
      rules: [
        {
          // RDMA devices an exporter sees; 0 (not absent) when it is up and
          // sees none, so that losing the last one is a drop too.
          record: names.rdmaDevices,
          expr: p.expr(|||
            count by (%(by)s, instance) (roce_device_info%(s)s)
            or on (%(by)s, instance)
            sum by (%(by)s, instance) (0 * (up%(s)s == 1))
          |||, { by: by, s: s() }),
        },
        {
          // Rate of each active port, with its NIC model for peer comparison.
          record: names.activeRateByHcaType,
          expr: p.expr(|||
            (roce_port_rate_bytes_per_second%(s)s and on (%(by)s, instance, device, port) (roce_port_up%(s)s == 1))
            * on (%(by)s, instance, device) group_left (hca_type)
            max by (%(by)s, instance, device, hca_type) (roce_device_info%(s)s)
          |||, { by: by, s: s() }),
        },
      ],
    }],
  },
}
