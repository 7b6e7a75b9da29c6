// "Fabric overview": ports, rates, throughput and findings of one node (or
// a few).
local common = import 'common.libsonnet';

function(c)
  local x = common(c);
  local g = x.g;
  local q = x.q;
  local rb = x.withRunbook;
  local port = '{{instance}} {{device}}/{{port}}';
  // The node's last burn-in (`roce_exporter check --load`, families
  // roce_load_test_*): when, the node's bandwidth against the sum of its
  // ports' line rates, and ports whose streams did not complete; between
  // the stats and the findings table, whose load-test findings they
  // explain. Empty (no data) where no load test wrote its results.
  local burnIn = [
    g.stat('Last burn-in',
           'Time since the last `roce_exporter check --load` of the selected exporters ended '
           + '(no data: no load test ran, or load_test.results_file is not set).',
           's',
           q('time() - max(roce_load_test_timestamp_seconds{%(n)s})')),
    rb(g.stat('Burn-in bandwidth',
              "The lowest node bandwidth of the last burn-in against the sum of its ports' "
              + 'line rates after encoding (every port loaded at once, largest message size).',
              'percentunit',
              q('min(roce_load_test_node_bandwidth_bytes_per_second{%(n)s} '
                + '/ roce_load_test_node_expected_bytes_per_second{%(n)s})'),
              thresholds=[[0.75, 'orange'], [0.9, 'green']],
              base='red'), ['load_test_node_below_line_rate', 'load_test_below_line_rate']),
    rb(g.stat('Burn-in ports not completed',
              'Ports whose stream in the last burn-in stopped early or was never granted a '
              + 'session by a responder on their rail.',
              'none',
              q('count(roce_load_test_outcome_info{%(n)s, outcome!="completed"}) or vector(0)'),
              thresholds=[[1, 'red']]), ['load_test_aborted']),
  ];
  x.dashboard('overview',
              'Fabric overview',
              'Ports, rates, throughput and findings of roce_exporter.',
              [
                g.stat('Ports up',
                       'RDMA ports that are ACTIVE and LinkUp.',
                       'none',
                       q('count(roce_port_up{%(d)s} == 1) or vector(0)')),
                rb(g.stat('Ports not up',
                          'RDMA ports that are not ACTIVE and LinkUp.',
                          'none',
                          q('count(roce_port_up{%(d)s} == 0) or vector(0)'),
                          thresholds=[[1, 'red']]), ['port_down']),
                g.stat('Critical findings',
                       "Active critical findings of the exporter's rules.",
                       'none',
                       q('sum(roce_findings_active{%(n)s, severity="critical"})'),
                       thresholds=[[1, 'red']]),
                g.stat('Warning findings',
                       "Active warning findings of the exporter's rules.",
                       'none',
                       q('sum(roce_findings_active{%(n)s, severity="warning"})'),
                       thresholds=[[1, 'orange']]),
                rb(g.stat('Failing collectors',
                          'Collectors whose last sample failed.',
                          'none',
                          q('count(roce_collector_success{%(n)s} == 0) or vector(0)'),
                          thresholds=[[1, 'red']]), ['collector_failing']),
                rb(g.stat('Oldest sample',
                          'Age of the oldest sample served by the selected exporters.',
                          's',
                          q('max(time() - roce_sample_timestamp_seconds{%(n)s})'),
                          thresholds=[[30, 'orange'], [120, 'red']]), ['RoceSampleStale']),
              ] + burnIn + [
                // Each finding's rule links to its runbook section on the exporter that
                // reports it.
                g.withCellLinks(g.table('Active findings',
                                        "Findings of the exporter's rules (details at "
                                        + '/findings on each exporter, or `roce_exporter check`); the rule '
                                        + 'links to its runbook section.',
                                        'none',
                                        q('roce_finding{%(n)s}'),
                                        hide=['Value']),
                                'rule',
                                [{
                                  title: 'Runbook: ${__data.fields.rule}',
                                  url: x.runbookURL('${__data.fields.rule}', '${__data.fields.instance}'),
                                  targetBlank: true,
                                }]),
                g.table('Ports',
                        'RDMA ports: link layer, netdev, state (1 up) and rate.',
                        'none',
                        q('roce_port_info{%(d)s} * on (instance, device, port) group_left () roce_port_up{%(d)s}'),
                        rename={ Value: 'up' },
                        h=8),
                rb(g.timeseries('Port rate',
                                'Data rate of each port as the kernel reports it.',
                                'Bps',
                                [g.target(q('roce_port_rate_bytes_per_second{%(d)s}'), port)]), ['link_rate_below_expected']),
                g.timeseries('Netdev speed',
                             'Link speed of the netdevs behind RDMA ports.',
                             'Bps',
                             [g.target(q('roce_netdev_speed_bytes_per_second{%(d)s}'), '{{instance}} {{netdev}}')]),
                g.timeseries('Receive throughput',
                             'RDMA port data received (counters/port_rcv_data × 4).',
                             'Bps',
                             [g.target(q('rate(roce_port_data_received_bytes_total{%(d)s}[%(r)s])'), port)]),
                g.timeseries('Transmit throughput',
                             'RDMA port data transmitted (counters/port_xmit_data × 4).',
                             'Bps',
                             [g.target(q('rate(roce_port_data_transmitted_bytes_total{%(d)s}[%(r)s])'), port)]),
                g.timeseries('Packets', 'RDMA port packets received and transmitted.', 'pps', [
                  g.target(q('rate(roce_port_packets_received_total{%(d)s}[%(r)s])'), port + ' rx'),
                  g.target(q('rate(roce_port_packets_transmitted_total{%(d)s}[%(r)s])'), port + ' tx'),
                ]),
                g.timeseries('Findings by severity',
                             'Active findings over time.',
                             'none',
                             [g.target(q('sum by (severity) (roce_findings_active{%(n)s})'), '{{severity}}')],
                             stack=true),
                g.table('Collectors',
                        'State of each collector in the last sample.',
                        'none',
                        q('roce_collector_state_info{%(n)s} == 1'),
                        hide=['Value'],
                        w=12),
                g.timeseries('Collector duration',
                             'Time each collector took in the last sample.',
                             's',
                             [g.target(q('roce_collector_duration_seconds{%(n)s}'), '{{instance}} {{collector}}')]),
                g.table('Netdevs',
                        'Netdevs behind RDMA ports: driver and operational state '
                        + '(operstate: up, down, lowerlayerdown, ...).',
                        'none',
                        q('roce_netdev_info{%(d)s}'),
                        hide=['Value'],
                        w=12),
                g.timeseries('Missed sample ticks',
                             "Sample ticks skipped because a sample or the sampler's "
                             + 'scheduling overran sample_interval.',
                             'short',
                             [g.target(q('increase(roce_sample_ticks_missed_total{%(n)s}[%(r)s])'), '{{instance}}')]),
                g.table('Devices',
                        'RDMA devices: driver, firmware, board, PCI address, NUMA node.',
                        'none',
                        q('roce_device_info{%(d)s}'),
                        hide=['Value']),
              ])
