// Joins with the exporters that run beside this one (docs/deploy.md,
// "Joins with node_exporter and dcgm-exporter"): one series per netdev and
// per GPU that carries both exporters' names for it, so that a query joins
// the other exporter's series to ours in one `* on (...) group_left (...)`.
local names = import '../lib/names.libsonnet';
local promql = import '../lib/promql.libsonnet';

// The host part of an `instance`: node1:9879, node1, 10.0.0.1:9100 and
// [fe80::1]:9100 give node1, node1, 10.0.0.1 and [fe80::1].
local hostOfInstance = '(.+?)(?::[0-9]+)?';

// `expr` through one label_replace per [label, source, regex] step, each
// step's label set to the regex's first group of `source`; written one step
// a line, indented by `pad`.
local relabel(expr, steps, pad) =
  std.repeat('label_replace(', std.length(steps)) + '\n' + pad + '  ' + expr
  + std.join('', [',\n%s  "%s", "$1", "%s", "%s")' % [pad, x[0], x[1], x[2]] for x in steps]);

{
  local c = $._config,
  local p = promql(c),
  local s = p.sel,
  local ne = '{' + c.nodeExporterSelector + '}',
  // The target labels both exporters' series share within one fleet: the
  // fleet labels without `job` (each exporter has its own).
  local shared = [l for l in p.fleetLabels() if l != 'job'],
  local on = std.join(', ', shared + ['host', 'device']),
  local target = std.join(', ', shared + ['job', 'instance']),

  // node_exporter: each RoCE netdev as node_exporter names it (its
  // `instance` and `device`), with our RDMA device and port and our
  // instance (`roce_instance`). The two exporters of one host are matched
  // on the host part of their instances or, where node_exporter is scraped
  // by address and we by node name (kube-prometheus-stack), on
  // node_uname_info's nodename; one node_exporter target per host and
  // netdev is kept.
  local ours = relabel('roce_netdev_info' + s(), [
    ['roce_instance', 'instance', '(.*)'],
    ['rdma_device', 'device', '(.*)'],
    ['device', 'netdev', '(.*)'],
    ['host', 'instance', hostOfInstance],
  ], '  '),
  local byAddress = relabel('node_network_info' + ne, [['host', 'instance', hostOfInstance]], '    '),
  local byNodename = relabel(
    'node_network_info%s * on (%s) group_left (nodename) node_uname_info%s' % [ne, target, ne],
    [['host', 'nodename', '(.+)']],
    '    '
  ),
  local netdev = p.expr(|||
    max by (%(by)s) (
      %(ours)s
      * on (%(on)s) group_left (instance)
      topk by (%(on)s) (1,
        %(byAddress)s
        or
        %(byNodename)s
      )
    )
  |||, {
    by: p.fleetBy(['instance', 'device', 'rdma_device', 'port', 'roce_instance']),
    ours: ours,
    on: on,
    byAddress: byAddress,
    byNodename: byNodename,
  }),

  // dcgm-exporter: each GPU with dcgm-exporter's keys beside ours:
  // pci_bus_id (NVML's form of the address, which the exporter exports),
  // UUID (NVML's, empty without NVML), and the host part of our instance as
  // Hostname (dcgm-exporter's label up to 4.5.x) and hostname (its label
  // since); roce_instance and roce_gpu copy our instance and gpu so that a
  // join can take them into dcgm-exporter's series, whose own instance and
  // gpu they would overwrite.
  local gpu = relabel('roce_gpu_info' + s(), [
    ['roce_instance', 'instance', '(.*)'],
    ['roce_gpu', 'gpu', '(.*)'],
    ['UUID', 'uuid', '(.*)'],
    ['Hostname', 'instance', hostOfInstance],
    ['hostname', 'instance', hostOfInstance],
  ], '  '),
  local keys = p.fleetBy([
    'instance',
    'gpu',
    'roce_instance',
    'roce_gpu',
    'pci_bus_id',
    'UUID',
    'Hostname',
    'hostname',
  ]),

  prometheusRules+:: {
    groups+: [{
      name: 'roce_exporter.joins',
      rules: [
        { record: names.nodeExporterJoin, expr: netdev },
        { record: names.dcgmJoin, expr: 'max by (%s) (\n  %s\n)' % [keys, gpu] },
      ],
    }],
  },
}
