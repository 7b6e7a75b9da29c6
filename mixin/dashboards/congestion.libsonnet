// "Congestion": PFC per priority, pause time, CNP/ECN and discards of one
// node (or a few).
local common = import 'common.libsonnet';

function(c)
  local x = common(c);
  local g = x.g;
  local q = x.q;
  local rb = x.withRunbook;
  local port = '{{instance}} {{device}}/{{port}}';
  local prio = '{{instance}} {{netdev}} prio {{priority}} {{direction}}';
  // node_exporter's view of the same netdevs, joined to the RDMA port.
  local kernel(metric, legend) = g.target(q(|||
    rate(node_network_%(metric)s_total{%(ne)s}[%(r)s])
      * on (%(cluster)s, instance, device) group_left (roce_instance, rdma_device, port)
      node_exporter_device:roce_netdev_port:info{%(base)s, roce_instance=~"$instance", rdma_device=~"$device"}
  |||, { metric: metric }), '{{roce_instance}} {{device}} ' + legend);
  x.dashboard('congestion',
              'Congestion',
              'PFC per priority, pause time, CNP/ECN and discards.',
              [
                rb(g.timeseries('PFC pause time ratio',
                                'Fraction of time a priority was paused by PFC (tx: this '
                                + 'NIC paused its peer; rx: the peer paused this NIC). Above 0.2 is a storm '
                                + '(RocePfcStorm).',
                                'percentunit',
                                [g.target(q('rate(roce_pfc_pause_duration_seconds_total{%(d)s}[%(r)s])'), prio)]), ['pfc_storm']),
                rb(g.timeseries('PFC pause frames',
                                'PFC pause frames (XOFF and XON) per priority and direction.',
                                'pps',
                                [g.target(q('rate(roce_pfc_pause_frames_total{%(d)s}[%(r)s])'), prio)]), ['pfc_pause_received', 'pfc_pause_sent']),
                g.timeseries('PFC pause transitions',
                             'Transitions between paused and not paused per priority.',
                             'cps',
                             [g.target(q('rate(roce_pfc_pause_transitions_total{%(d)s}[%(r)s])'), prio)]),
                g.timeseries('Pause storm detections',
                             'NIC pause storm detector events (mlx5 warning/error, '
                             + 'bnxt_en continuous).',
                             'short',
                             [g.target(q('increase(roce_pause_storm_events_total{%(d)s}[%(r)s])'),
                                       '{{instance}} {{netdev}} {{severity}}')]),
                g.timeseries('Global pause frames',
                             'IEEE 802.3x link-level pause frames.',
                             'pps',
                             [g.target(q('rate(roce_link_pause_frames_total{%(d)s}[%(r)s])'),
                                       '{{instance}} {{netdev}} {{direction}}')]),
                rb(g.timeseries('CNPs', 'Congestion notification packets sent (notification point) and handled '
                                        + 'or ignored (reaction point).', 'pps', [
                  g.target(q('rate(roce_cnp_sent_total{%(d)s}[%(r)s])'), port + ' sent'),
                  g.target(q('rate(roce_cnp_handled_total{%(d)s}[%(r)s])'), port + ' handled'),
                  g.target(q('rate(roce_cnp_ignored_total{%(d)s}[%(r)s])'), port + ' ignored'),
                ]), ['cnp_not_sent', 'cnp_ignored', 'sender_throttled']),
                rb(g.timeseries('ECN-marked RoCE packets',
                                'RoCE packets received with the CE mark.',
                                'pps',
                                [g.target(q('rate(roce_ecn_marked_packets_total{%(d)s}[%(r)s])'), port)]), ['receiver_congested']),
                g.timeseries('Packets the NIC marked, per priority',
                             'Received packets the NIC itself '
                             + 'ECN-marked because its per-host receive buffers were congested (mlx5 '
                             + 'rx_prioN_marked); switch CE marks are the ECN-marked RoCE packets panel.',
                             'pps',
                             [g.target(q('sum by (instance, netdev, priority) '
                                         + '(rate(roce_netdev_nic_ecn_marked_packets_total{%(d)s}[%(r)s]))'),
                                       '{{instance}} {{netdev}} prio {{priority}}')]),
                rb(g.timeseries('NIC discards by reason',
                                'Packets the NIC dropped, port-wide counters, by '
                                + "reason (rx_out_of_buffer: the host's receive rings, not the fabric).",
                                'pps',
                                [g.target(q('sum by (instance, netdev, reason) '
                                            + '(rate(roce_netdev_discards_total{%(d)s}[%(r)s]))'),
                                          '{{instance}} {{netdev}} {{reason}}')]), ['discards_growing', 'host_ring_drops']),
                rb(g.timeseries('NIC discards per priority',
                                'Packets the NIC dropped on one priority, by '
                                + 'reason: any on a PFC (lossless) priority is loss of RoCE traffic; lossy '
                                + 'priorities carry TCP and storage, which tolerate some.',
                                'pps',
                                [g.target(q('sum by (instance, netdev, priority, reason) '
                                            + '(rate(roce_netdev_priority_discards_total{%(d)s}[%(r)s]))'),
                                          '{{instance}} {{netdev}} prio {{priority}} {{reason}}')]), ['lossless_discards']),
                g.timeseries('Kernel drops and errors (node_exporter)', 'The same netdevs as node_exporter '
                                                                        + "reports them from the kernel's /proc/net/dev (node_network_*), beside the NIC's "
                                                                        + 'own discards: packets the kernel or driver dropped, and errors. Joined to the RDMA '
                                                                        + 'port through node_exporter_device:roce_netdev_port:info (docs/deploy.md); empty '
                                                                        + 'without node_exporter.', 'pps', [
                  kernel('receive_drop', 'rx drop'),
                  kernel('receive_errs', 'rx errors'),
                  kernel('transmit_drop', 'tx drop'),
                  kernel('transmit_errs', 'tx errors'),
                ]),
                rb(g.timeseries('RDMA out_of_buffer drops',
                                'Packets dropped for lack of receive WQEs or buffers.',
                                'pps',
                                [g.target(q('rate(roce_out_of_buffer_drops_total{%(d)s}[%(r)s])'), port)]), ['out_of_buffer']),
                rb(g.table('QoS configuration',
                           'Per netdev: trust, the priorities with PFC on, ETS '
                           + '(traffic class, selection and bandwidth per class), receive buffers, DCBX mode.',
                           'none',
                           q('roce_qos_info{%(d)s}'),
                           hide=['Value'],
                           w=12), ['pfc_priority_mismatch', 'roce_tc_shared', 'roce_tc_no_bandwidth', 'lossless_buffer_no_headroom']),
                rb(g.table('ECN enabled priorities',
                           'Priorities with RoCE ECN (DCQCN) on, per role: np '
                           + '(marks CNPs back), rp (slows down on CNPs) (mlx5).',
                           'none',
                           q('roce_ecn_info{%(d)s}'),
                           hide=['Value'],
                           w=12), ['pfc_without_ecn']),
                rb(g.table('QoS trust and MTU',
                           'Packet field the port classifies priority by, and the '
                           + 'netdev MTU.',
                           'bytes',
                           q('roce_netdev_mtu_bytes{%(d)s} * on (instance, netdev) group_left (trust) '
                             + 'roce_qos_info{%(d)s}'),
                           rename={ Value: 'mtu' }), ['roce_trust_pcp', 'mtu_below_jumbo']),
              ])
